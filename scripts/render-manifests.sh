#!/usr/bin/env bash
# render-manifests.sh: renders deploy/manifests/jaild.yaml, the plain
# manifests for clusters without Helm, from deploy/helm/jaild: the chart's
# defaults plus namespace.create=true, namespace.name=jaild.
#
#   scripts/render-manifests.sh            # rewrite deploy/manifests/jaild.yaml
#   scripts/render-manifests.sh --check    # exit 1 if it differs from a fresh render
set -euo pipefail
cd "$(dirname "$0")/.."
out=deploy/manifests/jaild.yaml

render() {
	cat <<'HEADER'
# jaild's plain Kubernetes manifests, rendered from deploy/helm/jaild by
# scripts/render-manifests.sh (the chart's defaults plus namespace.create=true,
# namespace.name=jaild). Do not edit: change the chart and render again.
# Before applying, create the Secrets the pods mount (jaild-tokens,
# jaild-tls, jaild-fleet-key: see docs/kubernetes.md) and label and taint the
# sandbox nodes (deploy/helm/jaild/values.yaml).
HEADER
	scripts/helm.sh template jaild deploy/helm/jaild --set namespace.create=true,namespace.name=jaild
}

case "${1:-}" in
--check)
	fresh=$(mktemp)
	trap 'rm -f "$fresh"' EXIT
	render > "$fresh"
	if ! diff -u "$out" "$fresh"; then
		echo "render-manifests.sh: $out differs from a fresh render of the chart: run scripts/render-manifests.sh" >&2
		exit 1
	fi
	;;
"")
	render > "$out.tmp"
	mv "$out.tmp" "$out"
	;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac
