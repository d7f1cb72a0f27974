{{/* The release's name for every object, cut to what labels allow. */}}
{{- define "jaild.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "jaild.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{- define "jaild.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "jaild.labels" -}}
{{ include "jaild.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "jaild.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* Seconds of a Go duration string of s, m or h ("300s", "5m", "1h"). */}}
{{- define "jaild.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "h" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int }}
{{- else -}}{{ fail (printf "duration %q: use a whole number of s, m or h" $d) }}
{{- end -}}
{{- end -}}

{{/* The names callers reach the Service by, for jaild's Host check. */}}
{{- define "jaild.hosts" -}}
{{- $svc := include "jaild.fullname" . -}}
{{- $ns := include "jaild.namespace" . -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- concat $hosts .Values.serve.allowedHosts | uniq | join "," -}}
{{- end -}}
