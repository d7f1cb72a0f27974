#!/usr/bin/env bash
# Installs what jaild needs on a fresh Debian/Ubuntu machine that has Go and
# gcc, then builds bin/jaild and bin/jaild-server. Idempotent; needs root.
#
#   libseccomp-dev pkg-config  seccomp support (cgo, -tags seccomp); its
#   libc6-dev                  static libraries link the binaries statically
#   iproute2 procps psmisc     tools the tests and the security suite use
#   jq                         the security suite reads jaild's JSON with it
#   python3 curl               the security suite's raw-syscall and memory
#                              probes; the benchmark waits for the daemon
#   runc bubblewrap hyperfine  the side-by-side benchmark (scripts/bench.sh)
#   busybox-static             scripts/mkrootfs.sh builds a small rootfs from it
#   nodejs npm                 the MCP end-to-end test drives jaild with the
#                              official TypeScript MCP client
#   haproxy                    the fleet test's load balancer in front of
#                              three daemons
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
	echo "setup.sh: run as root (it installs packages; jaild itself needs root)" >&2
	exit 1
fi

pkgs=(libseccomp-dev libc6-dev pkg-config iproute2 procps psmisc jq python3 curl runc bubblewrap hyperfine busybox-static ca-certificates haproxy)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup.sh: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export PATH="$PATH:/usr/local/go/bin"
# Two binaries (see their package docs). bin/jaild (cmd/jaild) is the lean
# one: run, doctor, and each one-shot sandbox's init, without the front
# ends' packages; its serve, mcp and remote execute bin/jaild-server
# (cmd/jaild-server), the complete one, which must sit next to it. Install
# the two together.
# seccomp: libcontainer's seccomp support (without it every sandbox start
# fails rather than run unfiltered). urfave_cli_no_docs: leaves out the CLI's
# man-page generator, whose package init would otherwise run in every
# sandbox's init process (jaild re-executes itself as each container's init).
# Static (netgo, osusergo: no glibc NSS): the binary starts twice per sandbox,
# and each start skips the dynamic loader, about 0.5 ms here.
tags=seccomp,urfave_cli_no_docs,netgo,osusergo
for b in jaild jaild-server; do
	CGO_ENABLED=1 go build -tags "$tags" -trimpath -ldflags '-extldflags=-static' -o "bin/$b" "./cmd/$b"
	echo "setup.sh: built $(pwd)/bin/$b"
done

# The MCP end-to-end test's client, at the exact versions of its lock file.
if [ ! -d scripts/mcp-e2e/node_modules ]; then
	(cd scripts/mcp-e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
