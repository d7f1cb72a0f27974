#!/usr/bin/env bash
# bench-sessions.sh: what a session adds to a call, and many sessions at
# once. Starts its own `jaild serve` on a loopback port with a private
# state dir and runs scripts/sessionbench against it:
#
#   - POST /run {"command":"true"} one-shot vs with a session_id, interleaved
#     in the same run, BENCH_N calls each: p50, p99, mean, and the difference;
#     then {"executable":"true"} the same way (no shell on either side);
#   - 20 sessions x 5 calls at once: wall time, p50 and p99 of the calls
#     (and the p50 of creating and deleting a session).
#
# Both with the daemon's default sandbox pool and with --pool 0: a one-shot
# call with default limits may take a sandbox started ahead of time from the
# pool; a call in a session takes the one its session keeps started on its
# workspace (--session-prestart, default true), or, with
# --session-prestart=false, builds its own.
#
#   sudo scripts/bench-sessions.sh
#   sudo BENCH_N=500 BENCH_POOLS="2" scripts/bench-sessions.sh
#
# Env: JAILD (default bin/jaild, with bin/jaild-server next to it; built with
# go build if missing), BENCH_N (default 200), BENCH_SESSIONS (20),
# BENCH_CALLS (5), BENCH_POOLS (the --pool values to measure, default "2 0"),
# BENCH_PRESTART (the --session-prestart values, default "true"), BENCH_GAP
# (an untimed pause before each call of the one-shot/session comparison, as
# an agent's think time, e.g. 300ms; default 0: back to back),
# BENCH_BREAKDOWN (default 1: with --pool 0, also time a one-shot sh -c, sh -c
# as an argv in the session's sandbox and the session's shell call with its
# state-reporting trap, to see where a session's shell call spends its extra
# time; 0 skips it; "all" runs it with every --pool value).
# Needs root and go; everything it starts is stopped and removed on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JAILD=${JAILD:-$REPO/bin/jaild}
N=${BENCH_N:-200}
SESSIONS=${BENCH_SESSIONS:-20}
CALLS=${BENCH_CALLS:-5}
POOLS=${BENCH_POOLS:-2 0}
PRESTARTS=${BENCH_PRESTART:-true}
GAP=${BENCH_GAP:-0}
BREAKDOWN=${BENCH_BREAKDOWN:-1}
export PATH=$PATH:/usr/local/go/bin

die() { echo "bench-sessions: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "must run as root (jaild builds namespaces and cgroups)"
command -v go > /dev/null || die "go is needed to build scripts/sessionbench"
if [ ! -x "$JAILD" ] || [ ! -x "$(dirname "$JAILD")/jaild-server" ]; then
  [ "$JAILD" = "$REPO/bin/jaild" ] || die "no jaild binary at $JAILD, or no jaild-server next to it"
  echo "bench-sessions: building bin/jaild and bin/jaild-server" >&2
  go build -tags seccomp,urfave_cli_no_docs -o bin/ ./cmd/jaild ./cmd/jaild-server
fi
JAILD=$(realpath "$JAILD")

T=$(mktemp -d -t jaild-bench-sessions.XXXXXX)
chmod 0711 "$T" # sandbox roots (unprivileged host uids) traverse into it
DAEMON_PID=
stop_daemon() {
  if [ -n "$DAEMON_PID" ]; then
    kill -TERM "$DAEMON_PID" 2> /dev/null || true
    wait "$DAEMON_PID" 2> /dev/null || true
    DAEMON_PID=
  fi
}
cleanup() {
  stop_daemon
  rm -rf --one-file-system "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$T/sessionbench" ./scripts/sessionbench
printf 'bench:%s\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$T/tokens"
chmod 0600 "$T/tokens"

echo "== sessions: POST /run {\"command\":\"true\"}, $N calls of each kind interleaved; $SESSIONS sessions x $CALLS calls at once"
echo "host: $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for pool in $POOLS; do
for prestart in $PRESTARTS; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  addr=127.0.0.1:$port
  "$JAILD" serve --state-dir "$T/state-$pool-$prestart" --listen "$addr" --token-file "$T/tokens" --audit-log off \
    --pool "$pool" --session-prestart="$prestart" --max-sessions-per-caller "$((SESSIONS + 1))" > "$T/serve-$pool-$prestart.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 100); do
    curl -fsS "http://$addr/healthz" > /dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2> /dev/null || break
    sleep 0.1
  done
  curl -fsS "http://$addr/healthz" > /dev/null 2>&1 ||
    die "jaild serve did not come up on $addr: $(tail -c 300 "$T/serve-$pool-$prestart.log")"
  echo
  echo "-- jaild serve --pool $pool --session-prestart=$prestart"
  timeout 900 "$T/sessionbench" -url "http://$addr" -token-file "$T/tokens" -n "$N" -gap "$GAP" \
    -sessions "$SESSIONS" -calls "$CALLS" || echo "bench-sessions: sessionbench failed (pool $pool)" >&2
  if { [ "$pool" = 0 ] && [ "$BREAKDOWN" != 0 ]; } || [ "$BREAKDOWN" = all ]; then
    echo
    echo "-- where the shell call's extra time goes (jaild serve --pool $pool --session-prestart=$prestart, interleaved, $N each)"
    timeout 900 "$T/sessionbench" -url "http://$addr" -token-file "$T/tokens" -n "$N" -gap "$GAP" -breakdown ||
      echo "bench-sessions: sessionbench -breakdown failed" >&2
  fi
  stop_daemon
done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
