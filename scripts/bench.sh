#!/usr/bin/env bash
# bench.sh: sandboxes per second and latency for `true`, in one run, side by
# side: a one-shot `jaild run -- true` (and the same with jaild-server, the
# complete build, to measure the lean build's gain), Debian's `runc run` on a
# user-namespace OCI bundle, and Debian's `bwrap --unshare-all`; then the Go
# benchmarks of packages jail and cgroup, and the HTTP daemon under load when
# scripts/loadgen exists.
#
#   sudo scripts/bench.sh                 # bin/jaild, 200 runs per measurement
#   sudo JAILD=/usr/local/bin/jaild BENCH_N=500 scripts/bench.sh
#
# Env: JAILD (default bin/jaild, built with bin/jaild-server if missing),
# BENCH_N (runs per tool and measurement, default 200), BENCH_WARMUP (default
# 10), BENCH_MAX_S (time cap of each measurement in seconds, default 60),
# BENCH_GO (0 skips the Go benchmarks), BENCH_GOTIME (go test -benchtime,
# default 1s).
# Latency: hyperfine (-N, no shell in between) when installed, else a loop
# timed with date +%s%N. Throughput: N sandboxes spread over 1 and 2 workers,
# each a bash loop, timed as a whole. Every loop is bounded in count and time.
# Needs root; apt: runc bubblewrap hyperfine busybox-static jq (or python3).
# A tool that is missing is reported as such and left out of the ratios.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JAILD=${JAILD:-$REPO/bin/jaild}
N=${BENCH_N:-200}
WARMUP=${BENCH_WARMUP:-10}
MAX_S=${BENCH_MAX_S:-60}
GOTIME=${BENCH_GOTIME:-1s}
export PATH=$PATH:/usr/local/go/bin

die() { echo "bench: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "must run as root (jaild and runc build namespaces and cgroups)"
if [ ! -x "$JAILD" ] || [ ! -x "$(dirname "$JAILD")/jaild-server" ]; then
  # setup.sh builds bin/jaild and the bin/jaild-server its serve executes
  # exactly as they are shipped (tags, static link).
  [ "$JAILD" = "$REPO/bin/jaild" ] || die "no jaild binary at $JAILD, or no jaild-server next to it"
  echo "bench: building $JAILD with scripts/setup.sh"
  "$REPO/scripts/setup.sh"
fi
JAILD=$(realpath "$JAILD")

T=$(mktemp -d -t jaild-bench.XXXXXX)
chmod 0711 "$T" # sandbox roots (unprivileged host uids) traverse into it
RUNC_ROOT=$T/runc-state
DAEMON_PID=
cleanup() {
  local id
  if [ -n "$DAEMON_PID" ]; then
    kill -TERM "$DAEMON_PID" 2> /dev/null || true
    wait "$DAEMON_PID" 2> /dev/null || true
  fi
  if command -v runc > /dev/null && [ -d "$RUNC_ROOT" ]; then
    for id in $(runc --root "$RUNC_ROOT" list -q 2> /dev/null); do
      runc --root "$RUNC_ROOT" delete -f "$id" > /dev/null 2>&1 || true
    done
  fi
  rm -rf --one-file-system "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# json FILE EXPR: reads a JSON value with jq, else python3 (EXPR is a jq path
# of plain .keys and [index]es).
json() {
  if command -v jq > /dev/null; then
    jq -r "$2" "$1"
  else
    python3 - "$1" "$2" << 'PY'
import json, re, sys
v = json.load(open(sys.argv[1]))
for key, idx in re.findall(r'\.(\w+)|\[(\d+)\]', sys.argv[2]):
    v = v[key] if key else v[int(idx)]
print(v)
PY
  fi
}

# --- the sandboxes compared --------------------------------------------------
# probe TOOL: keeps TOOL in the comparison if one run of it (run_TOOL) works.
probe() {
  if "run_$1" 0 > "$T/$1.out" 2>&1; then
    TOOLS+=("$1")
  else
    echo "bench: $1 fails here, left out: $(head -c 300 "$T/$1.out")" >&2
  fi
}
TOOLS=(jaild)
JSTATE=$T/jaild-state
run_jaild() { "$JAILD" run --state-dir "$JSTATE" -- true; }

# runc: a bundle as close to jaild's sandbox as an OCI config gets: user,
# pid, mount, network (lo only), ipc, uts and cgroup namespaces; container
# root mapped to an unprivileged host range (below jaild's, so they never
# share ids); no capabilities, no_new_privs; read-only busybox root with the
# host's /usr bound read-only, size-capped tmpfs /tmp and /work; jaild's
# default limits (256 MiB, 256 pids, 1 CPU); and jaild's seccomp allowlist,
# read from jail/seccomp.go so the two never drift apart (without a filter
# runc would be measured doing less work than jaild).
if command -v runc > /dev/null && command -v busybox > /dev/null; then
  B=$T/bundle
  mkdir -p "$B"
  "$REPO/scripts/mkrootfs.sh" "$B/rootfs" > /dev/null
  allowed=$(sed -n '/^var allowedSyscalls/,/^}/p' "$REPO/jail/seccomp.go" | grep -o '"[a-z0-9_]*"' | paste -sd, -)
  [ -n "$allowed" ] || die "could not read jaild's seccomp allowlist from jail/seccomp.go"
  cat > "$B/config.json" << 'EOF'
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": {"uid": 1000, "gid": 1000},
    "args": ["/bin/true"],
    "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work"],
    "cwd": "/work",
    "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}],
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": true},
  "hostname": "runc-bench",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=64m"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777", "size=64m"]},
    {"destination": "/work", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755", "size=64m", "uid=1000", "gid=1000"]},
    {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro", "nosuid", "nodev"]}
  ],
  "linux": {
    "uidMappings": [{"containerID": 0, "hostID": 536870912, "size": 65536}],
    "gidMappings": [{"containerID": 0, "hostID": 536870912, "size": 65536}],
    "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"},
                   {"type": "mount"}, {"type": "user"}, {"type": "cgroup"}],
    "resources": {
      "memory": {"limit": 268435456, "swap": 268435456},
      "pids": {"limit": 256},
      "cpu": {"quota": 100000, "period": 100000},
      "devices": [{"allow": false, "access": "rwm"}]
    },
    "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    "seccomp": {
      "defaultAction": "SCMP_ACT_ERRNO",
      "defaultErrnoRet": 1,
      "architectures": ["SCMP_ARCH_X86_64"],
      "syscalls": [
        {"names": [ALLOWED, "arch_prctl"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]},
        {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]},
        {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 10, "op": "SCMP_CMP_EQ"}]},
        {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_EQ"}]},
        {"names": ["socket", "socketpair"], "action": "SCMP_ACT_ERRNO", "errnoRet": 97, "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_GT"}]},
        {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
        {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 4294967295, "op": "SCMP_CMP_EQ"}]},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
      ]
    }
  }
}
EOF
  case $(uname -m) in
    aarch64) sed -i 's/"SCMP_ARCH_X86_64"/"SCMP_ARCH_AARCH64"/; s/, "arch_prctl"//' "$B/config.json" ;;
  esac
  sed -i "s/ALLOWED/$allowed/" "$B/config.json"
  # One id per worker: `runc run` deletes its container when it exits, so a
  # worker reuses its id; the cleanup trap deletes any that survive.
  run_runc() { runc --root "$RUNC_ROOT" run --bundle "$B" "jaild-bench-${1:-0}" < /dev/null; }
  probe runc
else
  echo "bench: runc or busybox missing (apt-get install runc busybox-static), runc left out" >&2
fi

if command -v bwrap > /dev/null; then
  BWRAP=(bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr)
  for l in bin sbin lib lib64; do
    [ -L "/$l" ] && BWRAP+=(--symlink "$(readlink "/$l")" "/$l")
  done
  BWRAP+=(--proc /proc --dev /dev --tmpfs /tmp --tmpfs /work --chdir /work /usr/bin/true)
  run_bwrap() { "${BWRAP[@]}" < /dev/null; }
  probe bwrap
else
  echo "bench: bwrap missing (apt-get install bubblewrap), left out" >&2
fi
run_jaild > "$T/jaild.out" 2>&1 || die "jaild run -- true fails: $(head -c 300 "$T/jaild.out")"

# jaild-server: the complete build (see README, Building) running the same
# one-shot, so that the lean build's gain is measured in the same run.
JSERVER=$(dirname "$JAILD")/jaild-server
run_jaild-server() { "$JSERVER" run --state-dir "$JSTATE" -- true; }
if [ -x "$JSERVER" ]; then
  probe jaild-server
else
  echo "bench: no jaild-server next to $JAILD, left out" >&2
fi

cmdline() {
  case $1 in
    jaild) echo "$JAILD run --state-dir $JSTATE -- true" ;;
    jaild-server) echo "$JSERVER run --state-dir $JSTATE -- true" ;;
    runc) echo "runc --root $RUNC_ROOT run --bundle $B jaild-bench-h" ;;
    bwrap) echo "${BWRAP[*]}" ;;
  esac
}

# --- latency -------------------------------------------------------------------
declare -A MED P90 RATE1 RATE2
echo "== latency of one sandbox running true ($N runs each, $WARMUP warm-up)"
if command -v hyperfine > /dev/null; then
  hf=(hyperfine -N --style basic --warmup "$WARMUP" --runs "$N" --export-json "$T/hf.json")
  for t in "${TOOLS[@]}"; do hf+=(-n "$t" "$(cmdline "$t")"); done
  timeout $((MAX_S * ${#TOOLS[@]} + 60)) "${hf[@]}" < /dev/null
  for i in "${!TOOLS[@]}"; do
    t=${TOOLS[$i]}
    MED[$t]=$(json "$T/hf.json" ".results[$i].median" | awk '{printf "%.2f", $1 * 1000}')
    # hyperfine keeps every run's time: the 90th percentile from them.
    P90[$t]=$(json "$T/hf.json" ".results[$i].times" 2> /dev/null | tr -d '[],' | grep . | sort -g |
      awk '{a[NR] = $1} END {i = int(NR * 0.9); if (i < 1) i = 1; printf "%.2f", a[i] * 1000}')
  done
else
  echo "(hyperfine not installed: a timed loop, each run forked from bash)"
  for t in "${TOOLS[@]}"; do
    for _ in $(seq "$WARMUP"); do "run_$t" 0 > /dev/null 2>&1; done
    : > "$T/lat.$t"
    end=$((SECONDS + MAX_S))
    for _ in $(seq "$N"); do
      t0=$(date +%s%N)
      "run_$t" 0 > /dev/null 2>&1
      echo $(($(date +%s%N) - t0)) >> "$T/lat.$t"
      [ "$SECONDS" -lt "$end" ] || break
    done
    MED[$t]=$(sort -n "$T/lat.$t" | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] / 1e6}')
    P90[$t]=$(sort -n "$T/lat.$t" | awk '{a[NR] = $1} END {i = int(NR * 0.9); if (i < 1) i = 1; printf "%.2f", a[i] / 1e6}')
  done
fi

# --- throughput ----------------------------------------------------------------
# rate TOOL WORKERS: N sandboxes over WORKERS concurrent loops; prints
# sandboxes per second (completed runs / wall time).
rate() {
  local t=$1 w=$2 per=$(($3 / $2)) i t0 t1 done_n=0 f
  t0=$(date +%s%N)
  for i in $(seq "$w"); do
    (
      end=$((SECONDS + MAX_S)) n=0
      for _ in $(seq "$per"); do
        "run_$t" "$i" > /dev/null 2>&1 || echo fail >> "$T/fail.$t"
        n=$((n + 1))
        [ "$SECONDS" -lt "$end" ] || break
      done
      echo "$n" > "$T/done.$t.$w.$i"
    ) &
  done
  wait
  t1=$(date +%s%N)
  for f in "$T/done.$t.$w".*; do done_n=$((done_n + $(cat "$f"))); done
  awk -v n="$done_n" -v ns=$((t1 - t0)) 'BEGIN {printf "%.1f", n / (ns / 1e9)}'
}
echo "== throughput: $N sandboxes at 1 and 2 parallel workers"
for t in "${TOOLS[@]}"; do
  RATE1[$t]=$(rate "$t" 1 "$N")
  RATE2[$t]=$(rate "$t" 2 "$N")
  if [ -s "$T/fail.$t" ]; then echo "bench: $t: $(wc -l < "$T/fail.$t") runs failed during the throughput loops" >&2; fi
done

echo
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then cgmode=v2; else cgmode=v1; fi
# The load average says whether anything else competed for the cores.
echo "== results ($(nproc) cores, kernel $(uname -r), cgroup $cgmode, load $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-13s %10s %10s %10s %10s\n' tool median_ms p90_ms 'sbx/s@1' 'sbx/s@2'
for t in "${TOOLS[@]}"; do
  printf '%-13s %10s %10s %10s %10s\n' "$t" "${MED[$t]}" "${P90[$t]}" "${RATE1[$t]}" "${RATE2[$t]}"
done
# ratio A B: A/B to two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
for o in jaild-server runc bwrap; do
  [ -n "${MED[$o]:-}" ] || continue
  echo "jaild/$o: latency $(ratio "${MED[jaild]}" "${MED[$o]}")x (lower is better)," \
    "sandboxes/s $(ratio "${RATE1[jaild]}" "${RATE1[$o]}")x @1, $(ratio "${RATE2[jaild]}" "${RATE2[$o]}")x @2 (higher is better)"
done
if [ -n "${MED[runc]:-}" ]; then
  if awk -v j="${MED[jaild]}" -v r="${MED[runc]}" 'BEGIN {exit !(j <= r)}'; then
    echo "target (one-shot jaild run no slower than runc run): met"
  else
    echo "target (one-shot jaild run no slower than runc run): NOT met"
  fi
fi

# --- Go benchmarks ---------------------------------------------------------------
if [ "${BENCH_GO:-1}" != 0 ] && command -v go > /dev/null &&
  grep -qs '^func Benchmark' jail/*_test.go; then
  echo
  echo "== go test -tags seccomp -run '^\$' -bench . -benchtime $GOTIME ./jail ./cgroup"
  timeout 900 go test -tags seccomp -run '^$' -bench . -benchtime "$GOTIME" -count 1 ./jail ./cgroup ||
    echo "bench: the Go benchmarks failed" >&2
fi

# --- the HTTP daemon under load ----------------------------------------------------
# bench_daemon: `jaild serve` on a loopback port with a private state dir,
# driven by scripts/loadgen (Go, another change) at 1, 4 and 16 concurrent
# clients posting {"command":"true"} to /run. The loadgen contract this
# function relies on:
#   loadgen -url URL -c CLIENTS -n REQUESTS -duration MAXDUR -body JSON
# prints, as its last line, one JSON object with at least
#   {"requests": N, "errors": N, "rps": F, "p50_ms": F, "p99_ms": F}.
# BENCH_SERVE_ARGS adds flags to `jaild serve` (default: --listen ADDR).
bench_daemon() {
  local port addr c out rps line errs
  echo
  echo "== jaild serve under load: POST /run {\"command\":\"true\"}"
  go build -o "$T/loadgen" ./scripts/loadgen || { echo "bench: loadgen does not build" >&2; return 0; }
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null ||
    echo 18080)
  addr=127.0.0.1:$port
  # shellcheck disable=SC2086 # BENCH_SERVE_ARGS is a list of flags
  "$JAILD" serve --state-dir "$T/serve-state" ${BENCH_SERVE_ARGS:---listen $addr} > "$T/serve.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 100); do
    curl -fsS "http://$addr/healthz" > /dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2> /dev/null || break
    sleep 0.1
  done
  if ! curl -fsS "http://$addr/healthz" > /dev/null 2>&1; then
    echo "bench: jaild serve did not come up on $addr: $(tail -c 300 "$T/serve.log")" >&2
    return 0
  fi
  printf '%-14s %8s %8s %8s %11s %11s\n' clients rps p50_ms p99_ms 'rps/runc@1' 'rps/runc@2'
  # "1 paced": one client that waits 100 ms after each answer, an agent's
  # occasional tool call: it sees the latency of a pooled sandbox.
  for c in 1 4 16 "1 paced"; do
    local pause=0s n=$((N * ${c% *} > 2000 ? 2000 : N * ${c% *}))
    [ "$c" = "1 paced" ] && pause=100ms && n=$((N > 100 ? 100 : N))
    out=$(timeout $((MAX_S + 30)) "$T/loadgen" -url "http://$addr/run" -c "${c% *}" -n "$n" -pause "$pause" \
      -duration "${MAX_S}s" -body '{"command":"true"}' 2>> "$T/loadgen.err") || true
    line=$(tail -1 <<< "$out")
    printf '%s\n' "$line" > "$T/lg.json"
    if rps=$(json "$T/lg.json" .rps 2> /dev/null); then
      printf '%-14s %8.1f %8.1f %8.1f %11s %11s\n' "$c" "$rps" "$(json "$T/lg.json" .p50_ms)" \
        "$(json "$T/lg.json" .p99_ms)" "$(ratio "$rps" "${RATE1[runc]:-0}")x" "$(ratio "$rps" "${RATE2[runc]:-0}")x"
      errs=$(json "$T/lg.json" .errors 2> /dev/null || echo 0)
      [ "${errs:-0}" = 0 ] || echo "  ($errs of the requests failed: $(json "$T/lg.json" .first_error 2> /dev/null))"
    else
      echo "clients=$c: loadgen said: $(tail -c 300 <<< "$out") $(tail -c 200 "$T/loadgen.err")"
    fi
  done
  kill -TERM "$DAEMON_PID"
  wait "$DAEMON_PID" || echo "bench: jaild serve exited $? on SIGTERM" >&2
  DAEMON_PID=
}
if [ -f scripts/loadgen/main.go ] && command -v go > /dev/null; then
  bench_daemon
fi
