#!/usr/bin/env bash
# helm.sh: runs the pinned Helm, installing it first if it is not cached.
#
#   scripts/helm.sh ARGS...        # e.g. scripts/helm.sh lint --strict deploy/helm/jaild
#
# Helm comes from the Go module proxy (go install), into
# $JAILD_K8S_CACHE/helm/$HELM_VERSION (default cache:
# ${XDG_CACHE_HOME:-$HOME/.cache}/jaild-k8s-test), so that chart renders are
# the same on every machine. HELM_PATH=1 prints the binary's path instead.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"
HELM_VERSION=v3.22.0
CACHE=${JAILD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jaild-k8s-test}
dir="$CACHE/helm/$HELM_VERSION"
if [ ! -x "$dir/helm" ]; then
	echo "helm.sh: installing helm $HELM_VERSION into $dir" >&2
	mkdir -p "$dir"
	# Into a temporary dir first: an interrupted install leaves no binary
	# that a later run would take for a complete one.
	tmp=$(mktemp -d "$CACHE/helm/.install.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" GOFLAGS=-trimpath go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
	mv "$tmp/helm" "$dir/helm"
	rm -rf "$tmp"
	trap - EXIT
fi
if [ "${HELM_PATH:-}" = 1 ]; then
	echo "$dir/helm"
	exit 0
fi
exec "$dir/helm" "$@"
