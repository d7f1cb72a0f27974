#!/usr/bin/env bash
# k8s-test.sh: tests the Helm chart (deploy/helm/jaild) and the plain
# manifests (deploy/manifests/jaild.yaml) against a real kube-apiserver.
#
#   sudo scripts/k8s-test.sh
#
# 1. helm (pinned, scripts/helm.sh): lint --strict, a render of every kind
#    and option combination that matters, the guards that must refuse bad
#    values, and the committed manifests equal to a fresh render.
# 2. etcd and kube-apiserver (and kubectl), built from the Go module proxy
#    by the wrapper modules in deploy/k8s-test and cached by version, started
#    on loopback with a private data dir, a static admin token (group
#    system:masters) and RBAC, PodSecurity admission and --allow-privileged.
#    No controller manager, scheduler or kubelet: objects are stored and
#    admitted, nothing runs.
# 3. kubectl apply --server-side --validate=strict of every render, with the
#    CRDs of the optional objects (prometheus-operator's ServiceMonitor and
#    PrometheusRule, cert-manager's Certificate) installed from their modules
#    so that their fields are checked too; misspelled fields must be refused.
# 4. PodSecurity: a Pod made of the DaemonSet's and the StatefulSet's pod
#    template is admitted in the chart's namespace (enforce=privileged) and
#    refused in one labelled enforce=baseline.
#
# One PASS/FAIL line per check, "N passed, M failed" last, exit 1 on a
# failure. Everything started (etcd, kube-apiserver, the temp dir) is torn
# down on exit. Cold, the builds take many minutes (docs/kubernetes.md).
# Cache: $JAILD_K8S_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/jaild-k8s-test).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export PATH="$PATH:/usr/local/go/bin"
CACHE=${JAILD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jaild-k8s-test}
export JAILD_K8S_CACHE=$CACHE
CHART=deploy/helm/jaild
APISERVER_MOD=deploy/k8s-test/apiserver
ETCD_MOD=deploy/k8s-test/etcd
# The modules the optional objects' CRDs come from.
PROM_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.85.0
CERT_MANAGER=github.com/cert-manager/cert-manager@v1.21.2

start=$(date +%s)
passed=0
failed=0
WORK=$(mktemp -d /tmp/jaild-k8s-test.XXXXXX)
pids=()

cleanup() {
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2> /dev/null
		wait "${pids[i]}" 2> /dev/null
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "== $* ($(($(date +%s) - start)) s)"; }
pass() {
	echo "PASS $1"
	passed=$((passed + 1))
}
fail() {
	echo "FAIL $1"
	failed=$((failed + 1))
	[ -n "${2:-}" ] && tail -n 15 <<< "$2" | sed 's/^/    /'
	return 0
}
# check NAME CMD...: PASS if CMD succeeds.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}
# refuse NAME PATTERN CMD...: PASS if CMD fails and says PATTERN (a fixed
# string); the refusal is shown.
refuse() {
	local name=$1 pattern=$2 out
	shift 2
	if out=$("$@" 2>&1); then
		fail "$name (accepted)" "$out"
	elif grep -qF -- "$pattern" <<< "$out"; then
		pass "$name"
		grep -F -m1 -- "$pattern" <<< "$out" | cut -c1-300 | sed 's/^/    refused: /'
	else
		fail "$name (failed without \"$pattern\")" "$out"
	fi
}
finish() {
	echo "$passed passed, $failed failed ($(($(date +%s) - start)) s)"
	[ "$failed" -eq 0 ]
	exit
}

# ---------------------------------------------------------------- helm
say "helm"
if ! HELM=$(HELM_PATH=1 scripts/helm.sh); then
	fail "install helm"
	finish
fi
check "helm lint --strict" "$HELM" lint --strict "$CHART"
check "helm lint --strict (StatefulSet, HPA, every option on)" "$HELM" lint --strict "$CHART" \
	--set kind=StatefulSet,autoscaling.enabled=true,namespace.create=true,namespace.name=jaild-lint,policy.configMap=jaild-policy \
	--set monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true \
	--set tls.certManager.enabled=true,tls.certManager.issuerRef.name=ca \
	--set 'fleetKey.acceptSecrets[0].name=jaild-fleet-key,fleetKey.acceptSecrets[0].key=next'

# The renders: name, then helm's --set values. Each renders into the
# namespace v-NAME, made below, or the one it creates (namespace.create).
variants=(
	"daemonset|"
	"statefulset|kind=StatefulSet"
	"statefulset-hpa|kind=StatefulSet,autoscaling.enabled=true"
	"monitoring|monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true"
	"tls-off|tls.enabled=false,monitoring.serviceMonitor.enabled=true"
	"cert-manager|tls.certManager.enabled=true,tls.certManager.issuerRef.name=jaild-ca"
	"namespace|namespace.create=true,namespace.name=jaild-ns"
	"policy|policy.configMap=jaild-policy"
	"fleet-accept|fleetKey.acceptSecrets[0].name=jaild-fleet-key,fleetKey.acceptSecrets[0].key=next,fleetKey.acceptSecrets[1].name=jaild-fleet-key-old"
	"everything|kind=StatefulSet,autoscaling.enabled=true,namespace.create=true,namespace.name=jaild-everything,policy.configMap=jaild-policy,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true,tls.certManager.enabled=true,tls.certManager.issuerRef.name=jaild-ca,fleetKey.acceptSecrets[0].name=jaild-fleet-key,fleetKey.acceptSecrets[0].key=next"
)
# The kinds each render must hold, sorted.
declare -A kinds=(
	[daemonset]="DaemonSet Service Service"
	[statefulset]="PodDisruptionBudget Service Service StatefulSet"
	[statefulset-hpa]="HorizontalPodAutoscaler PodDisruptionBudget Service Service StatefulSet"
	[monitoring]="ConfigMap DaemonSet PrometheusRule Service Service ServiceMonitor"
	[tls-off]="DaemonSet Service Service ServiceMonitor"
	[cert-manager]="Certificate DaemonSet Service Service"
	[namespace]="DaemonSet Namespace Service Service"
	[policy]="DaemonSet Service Service"
	[fleet-accept]="DaemonSet Service Service"
	[everything]="Certificate ConfigMap HorizontalPodAutoscaler Namespace PodDisruptionBudget PrometheusRule Service Service ServiceMonitor StatefulSet"
)
mkdir -p "$WORK/render"
for v in "${variants[@]}"; do
	name=${v%%|*} set=${v#*|}
	args=(template jaild "$CHART" --namespace "v-$name")
	[ -n "$set" ] && args+=(--set "$set")
	if ! out=$("$HELM" "${args[@]}" 2>&1); then
		fail "helm template $name" "$out"
		continue
	fi
	printf '%s\n' "$out" > "$WORK/render/$name.yaml"
	got=$(grep '^kind:' "$WORK/render/$name.yaml" | awk '{print $2}' | sort | xargs)
	if [ "$got" = "${kinds[$name]}" ]; then
		pass "helm template $name: $got"
	else
		fail "helm template $name: kinds \"$got\", want \"${kinds[$name]}\""
	fi
done

# What the options change in the pod and the ServiceMonitor.
has() { grep -qF -- "$2" "$WORK/render/$1.yaml"; }
hasnt() { ! has "$@"; }
check "statefulset: replicas 3, one pod per node (required anti-affinity)" \
	eval 'has statefulset "replicas: 3" && has statefulset requiredDuringSchedulingIgnoredDuringExecution'
check "statefulset-hpa: replicas left to the HPA" eval 'hasnt statefulset-hpa "replicas:"'
check "tls-off: plain HTTP (flag, probes, scrape), no TLS volume" \
	eval 'has tls-off --insecure-plaintext && has tls-off "scheme: HTTP" && has tls-off "scheme: http" && hasnt tls-off "--tls-cert" && hasnt tls-off "name: tls"'
check "monitoring: ServiceMonitor scrapes HTTPS with the TLS Secret's CA" \
	eval 'has monitoring "scheme: https" && has monitoring "key: ca.crt"'
check "cert-manager: the Certificate writes the Secret the pods mount" \
	eval 'has cert-manager "secretName: jaild-tls" && has cert-manager "issuerRef:"'
check "policy: --policy-dir from the ConfigMap" \
	eval 'has policy --policy-dir=/etc/jaild/policy && has policy "name: jaild-policy"'
check "fleet-accept: --fleet-key-accept per accepted key, each its Secret's key mounted" \
	eval 'has fleet-accept --fleet-key-accept=/etc/jaild/fleet-accept/0/next && has fleet-accept --fleet-key-accept=/etc/jaild/fleet-accept/1/key && has fleet-accept "secretName: jaild-fleet-key-old" && hasnt daemonset --fleet-key-accept'
check "namespace: PodSecurity enforce=privileged" \
	eval 'has namespace "pod-security.kubernetes.io/enforce: privileged"'

# The guards: values the chart must refuse.
refuse "guard: autoscaling with a DaemonSet" "autoscaling.enabled needs kind: StatefulSet" \
	"$HELM" template jaild "$CHART" --set autoscaling.enabled=true
refuse "guard: no tokens Secret" "tokens.existingSecret is required" \
	"$HELM" template jaild "$CHART" --set tokens.existingSecret=
refuse "guard: kind Deployment" 'kind "Deployment": DaemonSet or StatefulSet' \
	"$HELM" template jaild "$CHART" --set kind=Deployment
refuse "guard: cert-manager without an issuer" "tls.certManager.issuerRef.name is required" \
	"$HELM" template jaild "$CHART" --set tls.certManager.enabled=true
refuse "guard: the signing key also accepted" "is the signing key (fleetKey.existingSecret)" \
	"$HELM" template jaild "$CHART" --set 'fleetKey.acceptSecrets[0].name=jaild-fleet-key'
refuse "guard: an accepted key without its Secret's name" "each needs the name of its Secret" \
	"$HELM" template jaild "$CHART" --set 'fleetKey.acceptSecrets[0].key=next'
refuse "guard: a drain timeout in days" 'duration "2d"' \
	"$HELM" template jaild "$CHART" --set serve.drainTimeout=2d

refuse "guard: namespace.create in the release's own namespace" "namespace.create needs namespace.name" \
	"$HELM" template jaild "$CHART" --namespace jaild --set namespace.create=true,namespace.name=jaild

check "deploy/manifests/jaild.yaml equals a fresh render" scripts/render-manifests.sh --check

# ---------------------------------------------------------------- build
# The wrapper's replace list must be k8s.io/kubernetes's staging list, each
# at the staging modules' version.
modversion() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$1/go.mod"; }
K8S_VERSION=$(modversion "$APISERVER_MOD" k8s.io/kubernetes)
ETCD_VERSION=$(modversion "$ETCD_MOD" go.etcd.io/etcd/server/v3)
STAGING_VERSION=v0${K8S_VERSION#v1}
say "build etcd $ETCD_VERSION, kube-apiserver and kubectl $K8S_VERSION"
staging() {
	local dir
	dir=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | awk -F'"' '$2 == "Dir" {print $4}') || return 1
	[ -f "$dir/go.mod" ] || return 1
	diff <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1 " => " $1 " '"$STAGING_VERSION"'"}' "$dir/go.mod" | sort) \
		<(awk '$2 == "=>" {print $1 " => " $3 " " $4}' "$APISERVER_MOD/go.mod" | sort)
}
check "$APISERVER_MOD replaces k8s.io/kubernetes $K8S_VERSION's staging modules with $STAGING_VERSION" staging

# build DIR PKG NAME: go build PKG of the wrapper module DIR into the cache,
# keyed by the version and the hash of the module's go.sum.
build() {
	local dir=$1 pkg=$2 name=$3 key out
	key=$(sha256sum < "$dir/go.sum" | cut -c1-12)
	out="$CACHE/bin/$name-$4-$key"
	if [ ! -x "$out" ]; then
		local t0=$(date +%s)
		(cd "$dir" && go build -trimpath -o "$out.tmp" "$pkg") || { rm -f "$out.tmp"; return 1; }
		mv "$out.tmp" "$out"
		echo "   built $name in $(($(date +%s) - t0)) s" >&2
	fi
	echo "$out"
}
mkdir -p "$CACHE/bin"
if ! ETCD=$(build "$ETCD_MOD" go.etcd.io/etcd/server/v3 etcd "$ETCD_VERSION") ||
	! APISERVER=$(build "$APISERVER_MOD" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$K8S_VERSION") ||
	! KUBECTL=$(build "$APISERVER_MOD" k8s.io/kubernetes/cmd/kubectl kubectl "$K8S_VERSION"); then
	fail "build etcd, kube-apiserver, kubectl"
	finish
fi
pass "build etcd, kube-apiserver, kubectl (cached in $CACHE/bin)"

# ---------------------------------------------------------------- cluster
say "start etcd and kube-apiserver"
if ! command -v openssl > /dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl > /dev/null
fi
# free_port: a loopback port nothing listens on (the machine is shared).
free_port() {
	local p i
	for i in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null; then
			echo "$p"
			return
		fi
	done
	return 1
}
ETCD_PORT=$(free_port) ETCD_PEER_PORT=$(free_port) API_PORT=$(free_port)
while [ "$ETCD_PEER_PORT" = "$ETCD_PORT" ]; do ETCD_PEER_PORT=$(free_port); done
while [ "$API_PORT" = "$ETCD_PORT" ] || [ "$API_PORT" = "$ETCD_PEER_PORT" ]; do API_PORT=$(free_port); done
pki=$WORK/pki
mkdir -p "$pki" "$WORK/etcd" "$WORK/certs"
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
if ! out=$(
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
		-subj /CN=k8s-test-apiserver -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.crt" 2>&1 &&
		openssl genrsa -out "$pki/sa.key" 2048 2>&1 &&
		openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>&1
); then
	fail "make the serving cert and service-account key" "$out"
	finish
fi
echo "$TOKEN,k8s-test-admin,k8s-test-admin,system:masters" > "$pki/tokens.csv"
cat > "$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: k8s-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $pki/apiserver.crt
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: k8s-test
  context: {cluster: k8s-test, user: admin}
current-context: k8s-test
EOF
export KUBECONFIG=$WORK/kubeconfig
k() { "$KUBECTL" --request-timeout=60s "$@"; }

"$ETCD" --name k8s-test --data-dir "$WORK/etcd" --log-level warn --unsafe-no-fsync \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "k8s-test=http://127.0.0.1:$ETCD_PEER_PORT" > "$WORK/etcd.log" 2>&1 &
pids+=($!)
# Static token + RBAC: the token's group system:masters may do anything,
# nobody else anything (no anonymous requests). PodSecurity is listed
# though on by default, since the test is about it.
"$APISERVER" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --cert-dir "$WORK/certs" \
	--service-account-issuer https://kubernetes.default.svc \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range 10.96.0.0/16 \
	--token-auth-file "$pki/tokens.csv" --anonymous-auth=false --authorization-mode RBAC \
	--enable-admission-plugins NamespaceLifecycle,ServiceAccount,LimitRanger,ResourceQuota,PodSecurity \
	--allow-privileged=true --endpoint-reconciler-type none --profiling=false \
	> "$WORK/apiserver.log" 2>&1 &
pids+=($!)
ready=
for i in $(seq 120); do
	if out=$(k get --raw /readyz 2>&1) && [ "$out" = ok ]; then
		ready=1
		break
	fi
	if ! kill -0 "${pids[0]}" 2> /dev/null || ! kill -0 "${pids[1]}" 2> /dev/null; then break; fi
	sleep 0.5
done
if [ -z "$ready" ]; then
	fail "kube-apiserver ready" "$(tail -n 5 "$WORK/etcd.log"; tail -n 20 "$WORK/apiserver.log")"
	finish
fi
pass "kube-apiserver $K8S_VERSION ready on 127.0.0.1:$API_PORT (etcd $ETCD_VERSION)"
check "anonymous requests refused" eval "! \"$KUBECTL\" --kubeconfig=/dev/null --server https://127.0.0.1:$API_PORT --insecure-skip-tls-verify get ns"

# ---------------------------------------------------------------- CRDs
say "CRDs"
crd() { # MODULE@VERSION FILE...: apply the CRD files of a module's tree
	local dir f
	dir=$(cd "$WORK" && go mod download -json "$1" | awk -F'"' '$2 == "Dir" {print $4}') || return 1
	shift
	for f in "$@"; do
		[ -s "$dir/$f" ] || { echo "no $f in $dir" >&2; return 1; }
		k apply --server-side --validate=strict -f "$dir/$f" || return 1
	done
}
check "CRDs ServiceMonitor, PrometheusRule ($PROM_OPERATOR)" crd "$PROM_OPERATOR" \
	example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml \
	example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml
check "CRD Certificate ($CERT_MANAGER)" crd "$CERT_MANAGER" deploy/crds/cert-manager.io_certificates.yaml
check "CRDs established" k wait --for condition=Established --timeout 60s \
	crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com crd/certificates.cert-manager.io

# ---------------------------------------------------------------- apply
say "apply"
apply() { k apply --server-side --validate=strict --field-manager k8s-test -f "$1"; }
for v in "${variants[@]}"; do
	name=${v%%|*}
	[ -f "$WORK/render/$name.yaml" ] || continue
	if ! grep -q '^kind: Namespace' "$WORK/render/$name.yaml"; then
		k create namespace "v-$name" > /dev/null
	fi
	check "apply --server-side --validate=strict: $name" apply "$WORK/render/$name.yaml"
done
check "apply --server-side --validate=strict: deploy/manifests/jaild.yaml" apply deploy/manifests/jaild.yaml
check "namespace jaild: PodSecurity enforce=privileged" \
	eval '[ "$(k get ns jaild -o jsonpath="{.metadata.labels.pod-security\.kubernetes\.io/enforce}")" = privileged ]'

# Field validation really checks fields, the CRDs' included: a misspelled
# field in each must be refused, by server-side apply (which refuses fields
# its schema lacks) and by a strict create (fieldValidation=Strict).
k create namespace v-typo > /dev/null
typo() { # RENDER KIND FROM TO: the render's KIND object with FROM misspelled
	awk -v RS='\n---\n' -v kind="$2" '$0 ~ "\nkind: " kind "\n" {print "---"; print}' "$WORK/render/$1.yaml" |
		sed -e "s/$3/$4/" -e "s/namespace: v-$1\$/namespace: v-typo/" > "$WORK/typo.yaml"
	grep -q "$4" "$WORK/typo.yaml" || { echo "no $3 in $1's $2"; return 1; }
}
typo_apply() { typo "$@" && apply "$WORK/typo.yaml"; }
typo_create() { typo "$@" && k create --dry-run=server --validate=strict -f "$WORK/typo.yaml"; }
refuse "apply: DaemonSet with terminationGracePeriodSecond" '.spec.template.spec.terminationGracePeriodSecond: field not declared in schema' \
	typo_apply daemonset DaemonSet 'terminationGracePeriodSeconds:' 'terminationGracePeriodSecond:'
refuse "apply: ServiceMonitor with intervall" '.spec.endpoints[0].intervall: field not declared in schema' \
	typo_apply monitoring ServiceMonitor 'interval:' 'intervall:'
refuse "apply: Certificate with dnsName" '.spec.dnsName: field not declared in schema' \
	typo_apply cert-manager Certificate 'dnsNames:' 'dnsName:'
refuse "apply: PrometheusRule with a rule's exprs" '.rules[0].exprs: field not declared in schema' \
	typo_apply monitoring PrometheusRule 'expr:' 'exprs:'
refuse "create --validate=strict: StatefulSet with podManagementPolicies" 'unknown field "spec.podManagementPolicies"' \
	typo_create statefulset StatefulSet 'podManagementPolicy:' 'podManagementPolicies:'
refuse "create --validate=strict: Certificate with dnsName" 'unknown field "spec.dnsName"' \
	typo_create cert-manager Certificate 'dnsNames:' 'dnsName:'

# ---------------------------------------------------------------- fleet key
# docs/kubernetes.md's rotation commands, against the server: the Secret's
# keys are what each step says, and each is a key jaild loads (at least 32
# bytes once the white space around it is trimmed).
say "fleet key rotation"
fk() { k -n v-fleet-accept get secret jaild-fleet-key -o jsonpath="{.data.$1}"; }
fkok() { [ "$(fk "$1" | base64 -d | tr -d ' \t\n\r\v\f' | wc -c)" -ge 32 ]; }
fkpatch() { k -n v-fleet-accept patch secret jaild-fleet-key -p "$1" > /dev/null; }
check "fleet key Secret made as docs/kubernetes.md says" eval \
	'k -n v-fleet-accept create secret generic jaild-fleet-key --from-file=key=<(head -c32 /dev/urandom | base64) > /dev/null && fkok key'
check "step 1: a standing next key" eval \
	'fkpatch "{\"stringData\":{\"next\":\"$(head -c32 /dev/urandom | base64)\"}}" && fkok next && [ "$(fk next)" != "$(fk key)" ]'
fk_old=$(fk key) fk_new=$(fk next)
check "step 2: sign with the next key, accept the old one" eval \
	'key=$(fk key) next=$(fk next) && fkpatch "{\"data\":{\"key\":\"$next\",\"next\":\"$key\"}}" &&
	[ "$(fk key)" = "$fk_new" ] && [ "$(fk next)" = "$fk_old" ]'
check "step 3: the old key dropped for a fresh next one" eval \
	'fkpatch "{\"stringData\":{\"next\":\"$(head -c32 /dev/urandom | base64)\"}}" && fkok next &&
	[ "$(fk key)" = "$fk_new" ] && [ "$(fk next)" != "$fk_old" ] && [ "$(fk next)" != "$fk_new" ]'

# ---------------------------------------------------------------- helm install
# Helm itself against the server: install (the release stored as a
# Secret), an upgrade that changes the kind and turns the options on,
# uninstall leaving none of the chart's objects.
say "helm install"
check "helm install (defaults, --create-namespace)" \
	"$HELM" install jaild "$CHART" -n v-helm --create-namespace
check "helm upgrade to a StatefulSet with HPA, monitoring, cert-manager, policy" \
	"$HELM" upgrade jaild "$CHART" -n v-helm \
	--set kind=StatefulSet,autoscaling.enabled=true,policy.configMap=jaild-policy \
	--set monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true \
	--set tls.certManager.enabled=true,tls.certManager.issuerRef.name=jaild-ca
check "helm upgrade: the StatefulSet replaced the DaemonSet" \
	eval '[ "$(k get daemonset,statefulset -n v-helm -o name)" = statefulset.apps/jaild ]'
check "helm uninstall leaves none of the chart's objects" eval '"$HELM" uninstall jaild -n v-helm &&
	[ -z "$(k get all,pdb,hpa,configmap,servicemonitor,prometheusrule,certificate -n v-helm -o name -l app.kubernetes.io/instance=jaild)" ]'
check "helm install namespace.create=true (namespace.name=v-helm-ns, release in v-helm)" \
	"$HELM" install jaild-ns "$CHART" -n v-helm --set namespace.create=true,namespace.name=v-helm-ns
check "namespace v-helm-ns: made by the chart, PodSecurity enforce=privileged" \
	eval '[ "$(k get ns v-helm-ns -o jsonpath="{.metadata.labels.pod-security\.kubernetes\.io/enforce}")" = privileged ]'
check "helm uninstall (namespace.create=true)" "$HELM" uninstall jaild-ns -n v-helm
refuse "helm install namespace.create=true into the release's own namespace: refused by the chart" \
	"namespace.create needs namespace.name" \
	"$HELM" install jaild-own "$CHART" -n v-helm-own --create-namespace --set namespace.create=true

# ---------------------------------------------------------------- PodSecurity
say "PodSecurity"
k create namespace v-baseline > /dev/null
k label namespace v-baseline pod-security.kubernetes.io/enforce=baseline > /dev/null
for ns in jaild v-baseline; do k create serviceaccount default -n "$ns" > /dev/null 2>&1; done
# On workload controllers PodSecurity only warns.
sed 's/namespace: v-daemonset/namespace: v-baseline/' "$WORK/render/daemonset.yaml" > "$WORK/baseline.yaml"
if out=$(apply "$WORK/baseline.yaml" 2>&1) && grep -qF 'would violate PodSecurity "baseline:latest"' <<< "$out"; then
	pass "DaemonSet in an enforce=baseline namespace: stored, with PodSecurity's warning"
	grep -F -m1 'would violate PodSecurity' <<< "$out" | cut -c1-300 | sed 's/^/    warned: /'
else
	fail "DaemonSet in an enforce=baseline namespace: stored, with PodSecurity's warning" "$out"
fi
# Pods are enforced: one made of each workload's pod template (as stored by
# the API server) is admitted in jaild's namespace and refused under
# baseline. No scheduler: the admitted one stays Pending; deleted after.
podof() { # KIND NAMESPACE POD_NAMESPACE: a Pod of that workload's template
	local spec
	spec=$(k get "$1" jaild -n "$2" -o jsonpath='{.spec.template.spec}') || return 1
	printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"podsec-%s","namespace":"%s"},"spec":%s}\n' \
		"${1,,}" "$3" "$spec" > "$WORK/pod.json"
}
admitted() { # KIND NAMESPACE
	podof "$1" "$2" jaild || return 1
	k create -f "$WORK/pod.json" || return 1
	[ "$(k get pod "podsec-${1,,}" -n jaild -o jsonpath='{.status.phase}')" = Pending ] || return 1
	k delete pod "podsec-${1,,}" -n jaild --wait --timeout 30s
}
refused() { # KIND NAMESPACE
	podof "$1" "$2" v-baseline || return 1
	k create -f "$WORK/pod.json"
}
check "Pod of the DaemonSet's template admitted under enforce=privileged (namespace jaild)" admitted daemonset jaild
refuse "Pod of the DaemonSet's template refused under enforce=baseline" 'violates PodSecurity "baseline:latest"' \
	refused daemonset jaild
check "Pod of the StatefulSet's template admitted under enforce=privileged (namespace jaild)" admitted statefulset v-statefulset
refuse "Pod of the StatefulSet's template refused under enforce=baseline" 'violates PodSecurity "baseline:latest"' \
	refused statefulset v-statefulset

finish
