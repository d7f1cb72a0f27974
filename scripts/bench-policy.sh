#!/usr/bin/env bash
# bench-policy.sh: what the operator's Rego policy costs a request.
#
#   scripts/bench-policy.sh               # the Go benchmarks of package policy
#   sudo scripts/bench-policy.sh --daemon # and POST /run with and without a policy
#
# 1. The Go benchmarks of package policy (no root): a whole decision of the
#    router example (examples/policy, 12 modules) for an argv and a shell
#    request, seen for the first time (-new) and repeated (-repeat, answered
#    by the decision cache), and its parts (resolution, shell parse,
#    evaluation). Each reports p50 and p99 in microseconds.
# 2. With --daemon (root, bin/jaild built): `jaild serve` without a policy
#    and with --policy-dir examples/policy, in alternating rounds on the same
#    state dir, one paced client posting to /run a repeated {"command":"true"}
#    or a shell string new every time (both allowed by the example), and the
#    p50 and p99 of each round. The difference of the medians is what the
#    policy adds to a request, but on a noisy machine it is within the spread
#    of the rounds; so the policy rounds also print the daemon's own
#    histogram of its decisions (p50 interpolated in its bucket, and the
#    share under 0.2 ms, a bucket bound), which the sandboxes' noise does not
#    reach.
#
# Env: BENCH_N (decisions per benchmark, default 5000), BENCH_ROUNDS (daemon
# rounds of each kind, default 3), BENCH_REQS (requests per round, default
# 100), JAILD (default bin/jaild).
# scripts/bench.sh runs this with --daemon after its own table (BENCH_TOOLS
# "policy"), so that one run prints both issues' figures.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
N=${BENCH_N:-5000}
ROUNDS=${BENCH_ROUNDS:-3}
REQS=${BENCH_REQS:-100}
JAILD=${JAILD:-$REPO/bin/jaild}
export PATH=$PATH:/usr/local/go/bin
die() { echo "bench-policy: $*" >&2; exit 2; }

echo "== policy decisions (go test -bench ./policy, ${N}x; load average $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-26s %10s %10s\n' benchmark p50_us p99_us
go test -tags seccomp,urfave_cli_no_docs -run '^$' -bench 'Decide|Eval|Resolve|ParseShell' -benchtime "${N}x" ./policy |
  awk '/^Benchmark/ { name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
         for (i = 1; i <= NF; i++) { if ($i == "p50-us") p50 = $(i-1); if ($i == "p99-us") p99 = $(i-1) }
         printf "%-26s %10s %10s\n", name, p50, p99 }'

[ "${1:-}" = --daemon ] || exit 0
[ "$(id -u)" -eq 0 ] || die "--daemon must run as root (jaild serve builds sandboxes)"
[ -x "$JAILD" ] || die "no jaild at $JAILD (scripts/setup.sh builds bin/jaild and bin/jaild-server)"
command -v curl > /dev/null || die "--daemon needs curl"

T=$(mktemp -d /tmp/jaild-bench-policy.XXXXXX)
chmod 755 "$T" # the sandboxes reach the state dir in it
DAEMON_PID=
cleanup() {
  if [ -n "$DAEMON_PID" ]; then
    kill -TERM "$DAEMON_PID" 2> /dev/null || true
    wait "$DAEMON_PID" 2> /dev/null || true
  fi
  rm -rf "$T"
}
trap cleanup EXIT
go build -o "$T/loadgen" ./scripts/loadgen
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port

# round KIND BODY [VARY]: one daemon, one paced client, one line of
# results. With a policy, the daemon's own histogram of its decisions
# (jaild_policy_eval_seconds, read from /metrics before it stops) gives
# what the policy added to each request, free of the sandboxes' noise.
round() {
  local kind=$1 body=$2 vary=${3:-} out line metrics=
  local args=(serve --state-dir "$T/state" --listen "$addr" --pool 2 --audit-log off)
  [[ $kind == policy* ]] && args+=(--policy-dir "$REPO/examples/policy")
  "$JAILD" "${args[@]}" > "$T/serve.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 100); do
    curl -fsS "http://$addr/healthz" > /dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2> /dev/null || break
    sleep 0.1
  done
  curl -fsS "http://$addr/healthz" > /dev/null 2>&1 || die "jaild serve did not come up: $(tail -c 300 "$T/serve.log")"
  out=$(timeout 300 "$T/loadgen" -url "http://$addr/run" -c 1 -n "$REQS" -pause 100ms -duration 120s \
    -body "$body" ${vary:+-vary} 2> /dev/null) || true
  line=$(tail -1 <<< "$out")
  [[ $kind == policy* ]] && metrics=$(curl -fsS "http://$addr/metrics" | grep '^jaild_policy_eval_seconds_' || true)
  kill -TERM "$DAEMON_PID"
  wait "$DAEMON_PID" || true
  DAEMON_PID=
  python3 -c 'import json, sys
d = json.loads(sys.argv[2])
buckets, count = [], 0
for l in sys.argv[3].splitlines():
    name, value = l.rsplit(" ", 1)
    if name.startswith("jaild_policy_eval_seconds_bucket"):
        le = name.split("le=\"")[1].split("\"")[0]
        buckets.append((float("inf") if le == "+Inf" else float(le), float(value)))
    elif name.startswith("jaild_policy_eval_seconds_count"):
        count = float(value)
decision = ""
if count:
    under = next(c for le, c in buckets if abs(le - 200e-6) < 1e-12)
    lo, clo = 0.0, 0.0
    for le, c in sorted(buckets):  # p50 by linear interpolation in its bucket
        if c >= count / 2:
            p50 = lo + (le - lo) * (count / 2 - clo) / max(c - clo, 1)
            break
        lo, clo = le, c
    decision = "%6d %9.0f %9.1f" % (count, p50 * 1e6, 100 * under / count)
print("%-11s %8d %8d %10.2f %10.2f  %s" % (sys.argv[1], d["requests"], d["errors"], d["p50_ms"], d["p99_ms"], decision))' "$kind" "$line" "$metrics"
}

repeat='{"command":"true"}'
new='{"command":"cd /tmp && date | echo ok{{n}}"}'
echo
echo "== POST /run, 1 client every 100 ms, $REQS requests a round: $repeat every time (-repeat, the decision"
echo "   cache answers), or $new with n counting (-new: a new decision each time)"
echo "   decisions, dec_p50_us, dec_le_200us_pct: the daemon's own jaild_policy_eval_seconds histogram"
printf '%-11s %8s %8s %10s %10s  %6s %9s %9s\n' daemon requests errors p50_ms p99_ms decisions dec_p50_us dec_le_200us_pct
for _ in $(seq "$ROUNDS"); do
  round none-repeat "$repeat"
  round policy-repeat "$repeat"
  round none-new "$new" vary
  round policy-new "$new" vary
done
