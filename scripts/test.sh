#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, vet, the Go tests (real
# sandboxes on the real kernel, as root), then the security suite over the
# built binary. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"

echo "== go vet"
go vet -tags seccomp,urfave_cli_no_docs ./...
echo "== go test"
go test -tags seccomp,urfave_cli_no_docs -count=1 -timeout 30m ./...
echo "== security suite"
JAILD="$(pwd)/bin/jaild" scripts/security-test.sh
