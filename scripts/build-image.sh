#!/usr/bin/env bash
# build-image.sh: builds jaild's OCI image without a container engine.
#
#   sudo scripts/build-image.sh [OUT_DIR]      # default dist/
#
# Writes OUT_DIR/jaild-image.tar (docker-archive: `ctr images import` and
# `docker load` read it), OUT_DIR/oci/ (an OCI image layout, for skopeo or
# crane to push), OUT_DIR/jaild-image.digest, and prints the digest.
#
# Reproducible: the same commit, Debian mirror state and package list give
# the same digest. The root comes from mmdebstrap (Debian's reproducible
# bootstrapper: it honours SOURCE_DATE_EPOCH), with the packages listed in
# deploy/image/packages; the binaries from scripts/setup.sh (static,
# -trimpath); deploy/image stacks them with go-containerregistry.
# SOURCE_DATE_EPOCH defaults to the commit's time. MIRROR picks the Debian
# mirror (default http://deb.debian.org/debian), SUITE the release
# (default bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "build-image.sh: run as root (mmdebstrap runs the packages' scripts in a chroot)" >&2; exit 1; }
OUT=${1:-dist}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
export PATH="$PATH:/usr/local/go/bin"

if ! command -v mmdebstrap > /dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap > /dev/null
fi
scripts/setup.sh > /dev/null

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2> /dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
version=$(git describe --tags --always --dirty 2> /dev/null || echo dev)
revision=$(git rev-parse HEAD 2> /dev/null || echo unknown)
include=$(grep -v '^\s*#' deploy/image/packages | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

mkdir -p "$OUT"
rm -rf "$OUT/oci" "$OUT/rootfs.tar"
# Documentation is left out but for each package's copyright file, which
# Debian's licences ask to ship with the binaries.
mmdebstrap --quiet --mode=root --variant=minbase --include="$include" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	"$SUITE" "$OUT/rootfs.tar" "$MIRROR"
digest=$(go run ./deploy/image -base "$OUT/rootfs.tar" -bin bin -out "$OUT/jaild-image.tar" -oci "$OUT/oci" \
	-tag "jaild:${version//+/_}" -version "$version" -revision "$revision")
rm -f "$OUT/rootfs.tar"
echo "$digest" > "$OUT/jaild-image.digest"
echo "build-image.sh: $OUT/jaild-image.tar jaild:$version $digest"
