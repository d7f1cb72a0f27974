#!/usr/bin/env bash
# bench.sh: how fast jaild starts sandboxes, side by side in one run with
# runc, bwrap and unshare, and the ratios to its targets. One table
# per run:
#
#   jaild serve      POST /run {"command":"true"}: one paced client (a
#                    request every 100 ms: p50/p99 of a pooled sandbox), then
#                    1, 4 and 16 connections flat out (req/s)
#   jaild run        `jaild run -- true`, the one-shot
#   runc run         Debian's runc on a bundle with jaild's namespaces,
#                    mounts, limits and seccomp allowlist (made here)
#   bwrap            `bwrap --unshare-all` (no cgroups, no seccomp)
#   unshare          `unshare -Urpfm --mount-proc true`, also paced (one
#                    start every 100 ms, as the daemon's paced client)
#   policy           scripts/bench-policy.sh --daemon, after the
#                    table (the router example's decisions, and POST /run
#                    with and without it, paced, in alternating rounds)
#   density          "with N live sessions": a fresh `jaild serve` filled
#                    with idle sessions (BENCH_DENSITY counts), at each count
#                    the session create rate, one-shot req/s at 1 and 4
#                    connections, a paced pooled one-shot, calls back to back
#                    and 4 at once in one session, the memory per idle
#                    session, and the front end's and the worker's mount
#                    table lines and open descriptors (scripts/sessionbench
#                    -density); the daemon's sessions go dormant after
#                    BENCH_DENSITY_IDLE (--session-prestart-idle), which
#                    each fill waits past, as a real fleet's idle sessions
#                    would be, and each level ends with the first call in
#                    20 dormant sessions
#
# Each one-shot tool is measured twice: one worker (latency p50/p99) and two
# workers (sandboxes/s). Every level is a scripts/loadgen run (HTTP, or -exec
# for the one-shots: no shell fork per run). CPU per sandbox is taken two
# ways over each level: host busy time from /proc/stat (what the targets use;
# it counts everything else running on the machine too) and, on cgroup v1,
# the cpuacct usage of a cgroup this script makes for the tool (the daemon's
# processes and sandboxes, or the loop and its sandboxes), which the other
# load of a shared machine does not reach. The load average is printed with
# the table: compare ratios within one run, not absolute figures across runs.
#
#   sudo scripts/bench.sh                  # 20 s per level
#   sudo BENCH_QUICK=1 scripts/bench.sh    # about 2 min in all
#
# Env: JAILD (default bin/jaild; bin/jaild-server must sit next to it; both
# built with go build when missing), BENCH_SECS (seconds per level, default
# 20, quick 4), BENCH_PACED_N (paced requests, default 200, quick 40),
# BENCH_ROUNDS (rounds of every measurement, interleaved; medians printed;
# default 1), BENCH_SERVE_ARGS (more flags for jaild serve), BENCH_TOOLS
# (which to run, default "serve jaild runc bwrap unshare policy density"),
# BENCH_DENSITY (the idle session counts, default 0,250,500,1000,2000; quick
# 0,250), BENCH_DENSITY_IDLE (the density daemon's --session-prestart-idle,
# default 5s; 0: sessions never go dormant), BENCH_SERIES (the back-to-back
# calls in one session at each density level, default 100: the four or so
# sandboxes a busy session keeps started serve only the first),
# BENCH_DENSITY_BASELINE (default 1: a second daemon without sessions,
# each one-shot throughput level measured on it right after; 0: none),
# BENCH_GO=1 (also the Go
# benchmarks of ./jail).
# Needs root. Installs what is missing with apt: runc bubblewrap
# busybox-static jq (wrk is not needed: scripts/loadgen drives the daemon).
# Everything it makes (daemon, state, cgroups, runc containers) is removed on
# exit, Ctrl-C included.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
export PATH=$PATH:/usr/local/go/bin
JAILD=${JAILD:-$REPO/bin/jaild}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  SECS=${BENCH_SECS:-4} PACED_N=${BENCH_PACED_N:-40}
else
  SECS=${BENCH_SECS:-20} PACED_N=${BENCH_PACED_N:-200}
fi
ROUNDS=${BENCH_ROUNDS:-1}
WANT=" ${BENCH_TOOLS:-serve jaild runc bwrap unshare policy density} "
if [ "${BENCH_QUICK:-0}" = 1 ]; then DENSITY=${BENCH_DENSITY:-0,250}; else DENSITY=${BENCH_DENSITY:-0,250,500,1000,2000}; fi
DENSITY_IDLE=${BENCH_DENSITY_IDLE:-5s}
SERIES=${BENCH_SERIES:-100}
DENSITY_BASELINE=${BENCH_DENSITY_BASELINE:-1}

die() { echo "bench: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "must run as root (jaild and runc build namespaces and cgroups)"
missing=()
for p in runc:runc bwrap:bubblewrap busybox:busybox-static jq:jq unshare:util-linux curl:curl; do
  command -v "${p%%:*}" > /dev/null || missing+=("${p#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null ||
    echo "bench: could not install ${missing[*]}; the tools missing are left out" >&2
fi
if [ ! -x "$JAILD" ] || [ ! -x "$(dirname "$JAILD")/jaild-server" ]; then
  [ "$JAILD" = "$REPO/bin/jaild" ] || die "no jaild at $JAILD, or no jaild-server next to it"
  echo "bench: building bin/jaild and bin/jaild-server as scripts/setup.sh does (static)" >&2
  for b in jaild jaild-server; do
    CGO_ENABLED=1 go build -tags seccomp,urfave_cli_no_docs,netgo,osusergo -trimpath -ldflags '-extldflags=-static' -o "bin/$b" "./cmd/$b"
  done
fi
JAILD=$(realpath "$JAILD")

T=$(mktemp -d -t jaild-bench.XXXXXX)
chmod 0711 "$T" # sandbox roots (unprivileged host uids) traverse into it
RUNC_ROOT=$T/runc-state
STATE=$T/state
CG=
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  CGMODE=v2
else
  CGMODE=v1
  # Under this shell's own cpuacct cgroup (see the density section's
  # memory cgroup).
  own=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3 }' /proc/self/cgroup)
  [ -d /sys/fs/cgroup/cpuacct ] && CG=/sys/fs/cgroup/cpuacct${own%/}/jaild-bench.$$
fi
DAEMON_PID=
BASE_PID=
LOADGEN_PID=
cleanup() {
  local id
  trap - EXIT INT TERM
  if [ -n "$LOADGEN_PID" ]; then
    kill -TERM "$LOADGEN_PID" 2> /dev/null || true
    wait "$LOADGEN_PID" 2> /dev/null || true
  fi
  stop_daemon
  stop_baseline
  if command -v runc > /dev/null && [ -d "$RUNC_ROOT" ]; then
    for id in $(runc --root "$RUNC_ROOT" list -q 2> /dev/null); do
      runc --root "$RUNC_ROOT" delete -f "$id" > /dev/null 2>&1 || true
    done
  fi
  # A one-shot killed mid-run leaves its sandbox: the sweep of the next
  # start with the same state dir removes it.
  [ ! -d "$STATE" ] || timeout 30 "$JAILD" run --state-dir "$STATE" -- true > /dev/null 2>&1 || true
  # The cgroups made here (and whatever the tools nested in them), deepest
  # first; every process in them has exited by now.
  if [ -n "$CG" ] && [ -d "$CG" ]; then
    for _ in 1 2 3 4 5; do
      find "$CG" -depth -type d -exec rmdir {} + 2> /dev/null || true
      [ -d "$CG" ] || break
      sleep 0.2
    done
    [ ! -d "$CG" ] || echo "bench: could not remove $CG" >&2
  fi
  # The density level's memory cgroup, if an interrupt left it.
  if [ -n "${MEMCG:-}" ] && [ -d "$MEMCG" ]; then
    find "$MEMCG" -depth -type d -exec rmdir {} + 2> /dev/null || true
  fi
  rm -rf --one-file-system "$T"
}
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  kill -TERM "$DAEMON_PID" 2> /dev/null || true
  wait "$DAEMON_PID" 2> /dev/null || true
  DAEMON_PID=
}
# wait_healthy PORT PID: until the daemon PID answers /healthz on PORT, or
# is gone, or 15 s have passed.
wait_healthy() {
  for _ in $(seq 150); do
    curl -fsS "http://127.0.0.1:$1/healthz" > /dev/null 2>&1 && return 0
    kill -0 "$2" 2> /dev/null || return 0
    sleep 0.1
  done
}
stop_baseline() {
  [ -n "$BASE_PID" ] || return 0
  kill -TERM "$BASE_PID" 2> /dev/null || true
  wait "$BASE_PID" 2> /dev/null || true
  BASE_PID=
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- measuring -------------------------------------------------------------------
# cg_make NAME: a fresh cpuacct cgroup for one level ("" without one).
cg_make() {
  [ -n "$CG" ] || return 0
  mkdir -p "$CG/$1"
  echo "$CG/$1"
}
# cg_usage DIR: its CPU time in ns (0 without a cgroup).
cg_usage() { if [ -n "$1" ]; then cat "$1/cpuacct.usage"; else echo 0; fi; }
# in_cg DIR: the words that run a command in cgroup DIR (or where it is)
# by exec, so that nothing but the command and its children are charged
# there: "${IN_CG[@]}" CMD...
in_cg() {
  IN_CG=()
  [ -z "$1" ] || IN_CG=(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$1")
}
# busy_ms: host CPU busy time so far, in ms (/proc/stat, all CPUs).
busy_ms() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / {print int(($2 + $3 + $4 + $7 + $8 + $9) * 1000 / hz)}' /proc/stat
}

LG=$T/loadgen
go build -o "$LG" ./scripts/loadgen || die "scripts/loadgen does not build"

# measure KEY CGDIR LOADGEN-ARGS...: one level; its JSON line (requests,
# rps, p50_ms, p99_ms) with host_cpu_ms and cg_cpu_ms per sandbox added is
# appended to $T/res.KEY. The cgroup, if not "", is where the daemon runs
# (the caller puts it there) or, with LG_IN_CG=1, where loadgen runs.
measure() {
  local key=$1 cgd=$2 b0 b1 c0 c1 out line
  shift 2
  b0=$(busy_ms) c0=$(cg_usage "$cgd")
  IN_CG=()
  [ "${LG_IN_CG:-0}" = 0 ] || in_cg "$cgd"
  # In the background and waited for, so that a signal to this script
  # runs its trap at once (loadgen bounds itself with -duration).
  "${IN_CG[@]}" "$LG" -warmup 0 -duration "${SECS}s" "$@" > "$T/lg.out" 2>> "$T/loadgen.err" &
  LOADGEN_PID=$!
  wait "$LOADGEN_PID" || true
  LOADGEN_PID=
  b1=$(busy_ms) c1=$(cg_usage "$cgd")
  line=$(tail -1 "$T/lg.out")
  if ! jq -e .requests <<< "$line" > /dev/null 2>&1 || [ "$(jq '.requests - .errors' <<< "$line")" -le 0 ]; then
    echo "bench: $key: no result: $(tail -c 300 "$T/loadgen.err")" >&2
    return 0
  fi
  [ "$(jq .errors <<< "$line")" = 0 ] || echo "bench: $key: $(jq -r '"\(.errors) errors, first: \(.first_error)"' <<< "$line")" >&2
  jq -c --argjson b "$((b1 - b0))" --argjson c "$((c1 - c0))" --arg cg "${cgd:+1}" \
    '. + {host_cpu_ms: ($b / .requests), cg_cpu_ms: (if $cg == "1" then $c / 1e6 / .requests else null end),
          load: "'"$(cut -d' ' -f1 /proc/loadavg)"'"}' <<< "$line" >> "$T/res.$key"
}

# --- the one-shot tools ------------------------------------------------------------
declare -A CMD
CMD[jaild]="$JAILD run --state-dir $STATE -- true"
CMD[unshare]="unshare -Urpfm --mount-proc true"
if command -v bwrap > /dev/null; then
  BWRAP=(bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr)
  for l in bin sbin lib lib64; do
    [ -L "/$l" ] && BWRAP+=(--symlink "$(readlink "/$l")" "/$l")
  done
  BWRAP+=(--proc /proc --dev /dev --tmpfs /tmp --tmpfs /work --chdir /work /usr/bin/true)
  CMD[bwrap]="${BWRAP[*]}"
fi

# runc: a bundle as close to jaild's sandbox as an OCI config gets: user,
# pid, mount, network (lo only), ipc, uts and cgroup namespaces; container
# root mapped to an unprivileged host range (below jaild's, so they never
# share ids); no capabilities, no_new_privs; read-only busybox root with the
# host's /usr bound read-only, size-capped tmpfs /tmp and /work; jaild's
# default limits (256 MiB, 256 pids, 1 CPU); and jaild's seccomp allowlist,
# read from jail/seccomp.go so the two never drift apart.
make_bundle() {
  local B=$T/bundle allowed
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
  # A container id per run ({n}): runc run deletes its container when it
  # exits; the cleanup deletes any that survive.
  CMD[runc]="runc --root $RUNC_ROOT run --bundle $B jaild-bench-{n}"
}
if [[ $WANT == *" runc "* ]] && command -v runc > /dev/null && command -v busybox > /dev/null; then
  make_bundle
fi

TOOLS=()
for t in jaild runc bwrap unshare; do
  [[ $WANT == *" $t "* ]] || continue
  if [ -z "${CMD[$t]:-}" ]; then
    echo "bench: $t is not installed, left out" >&2
    continue
  fi
  # shellcheck disable=SC2086 # CMD is a word list
  if ! out=$(${CMD[$t]//\{n\}/0} < /dev/null 2>&1); then
    echo "bench: $t fails here, left out: $(head -c 300 <<< "$out")" >&2
    continue
  fi
  TOOLS+=("$t")
done

# oneshot TOOL: its latency at one worker and its rate at two; the loop
# (loadgen) runs in the level's cgroup, with the sandboxes it starts.
oneshot() {
  local t=$1 w
  # shellcheck disable=SC2086
  "$LG" -exec -c 1 -n 3 -warmup 0 -duration 30s -- ${CMD[$t]} > /dev/null 2>&1 &
  LOADGEN_PID=$!
  wait "$LOADGEN_PID" || true
  LOADGEN_PID=
  for w in 1 2; do
    # shellcheck disable=SC2086
    LG_IN_CG=1 measure "$t.$w" "$(cg_make "$t.$w.$RANDOM")" -exec -c "$w" -n 100000 -- ${CMD[$t]}
  done
  # unshare also paced as jaild serve's paced client is: a start after a
  # pause finds cold caches and idle CPUs, and costs more than one of a
  # loop (vm2: 2.7 against 1.9 ms), so the pooled latency is compared
  # with the same pattern.
  if [ "$t" = unshare ]; then
    # shellcheck disable=SC2086
    LG_IN_CG=1 measure "$t.paced" "$(cg_make "$t.paced.$RANDOM")" -exec -c 1 -n "$PACED_N" -pause 100ms -- ${CMD[$t]}
  fi
}

# --- the daemon ------------------------------------------------------------------
# daemon: jaild serve on a loopback port, in a cgroup of its own; the paced
# level, then 1, 4 and 16 connections; its RSS idle and at its peak.
daemon() {
  local port addr cgd pids p rss
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null ||
    echo 18080)
  addr=127.0.0.1:$port
  cgd=$(cg_make "serve.$RANDOM")
  in_cg "$cgd"
  # shellcheck disable=SC2086 # BENCH_SERVE_ARGS is a list of flags
  "${IN_CG[@]}" "$JAILD" serve --listen "$addr" --state-dir "$STATE" ${BENCH_SERVE_ARGS:-} > "$T/serve.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 150); do
    curl -fsS "http://$addr/healthz" > /dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2> /dev/null || break
    sleep 0.1
  done
  if ! curl -fsS "http://$addr/healthz" > /dev/null 2>&1; then
    echo "bench: jaild serve did not come up on $addr: $(tail -c 300 "$T/serve.log")" >&2
    stop_daemon
    return 0
  fi
  # Front end and worker (not the watchdog, not the sandboxes).
  pids="$DAEMON_PID $(pgrep -P "$DAEMON_PID" -f ' worker ' | tr '\n' ' ')"
  "$LG" -url "http://$addr/run" -c 1 -n 10 -warmup 0 -duration 30s -body '{"command":"true"}' > /dev/null 2>&1 &
  LOADGEN_PID=$!
  wait "$LOADGEN_PID" || true
  LOADGEN_PID=
  sleep 1 # the pool refills
  rss=0 anon=0
  for p in $pids; do
    rss=$((rss + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
    anon=$((anon + $(awk '/^RssAnon/ {print $2}' "/proc/$p/status")))
  done
  echo "$rss" >> "$T/res.rss_idle"
  echo "$anon" >> "$T/res.rss_anon"
  measure serve.paced "$cgd" -url "http://$addr/run" -c 1 -n "$PACED_N" -pause 100ms -body '{"command":"true"}'
  for c in 1 4 16; do
    measure "serve.$c" "$cgd" -url "http://$addr/run" -c "$c" -n 100000 -body '{"command":"true"}'
  done
  rss=0
  for p in $pids; do rss=$((rss + $(awk '/^VmHWM/ {print $2}' "/proc/$p/status"))); done
  echo "$rss" >> "$T/res.rss_peak"
  stop_daemon
}

# --- the run ---------------------------------------------------------------------
echo "bench: $SECS s per level, $PACED_N paced requests, $ROUNDS round(s); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$ROUNDS"); do
  # Interleaved: the daemon, then each one-shot tool, every round.
  [[ $WANT != *" serve "* ]] || daemon
  for t in "${TOOLS[@]}"; do oneshot "$t"; done
  echo "bench: round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

# --- the table -------------------------------------------------------------------
# get KEY FIELD: the median over rounds of FIELD of level KEY ("" if none).
get() {
  [ -s "$T/res.$1" ] || return 0
  jq -s -r --arg f "$2" 'map(.[$f]) | map(select(. != null)) | sort |
    if length == 0 then "" else .[(length - 1) / 2 | floor] end' "$T/res.$1"
}
num() { [ -s "$T/res.$1" ] && sort -n "$T/res.$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
f1() { [ -n "$1" ] && printf '%.1f' "$1" || printf -- '-'; }
f2() { [ -n "$1" ] && printf '%.2f' "$1" || printf -- '-'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b > 0) printf "%.2fx", a / b; else print "n/a"}'; }
meets() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {if (v == "") {print "n/a"; exit}
  ok = (op == "<=") ? v <= t : (op == ">=") ? v >= t : v < t; print ok ? "met" : "NOT met"}'; }

echo
echo "== jaild bench ($(nproc) cores, kernel $(uname -r), cgroup $CGMODE, $SECS s per level, $ROUNDS round(s), load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
printf '| %-32s | %8s | %8s | %8s | %12s | %10s | %5s |\n' what 'req/s' 'p50 ms' 'p99 ms' 'host CPU ms' 'cg CPU ms' load
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..34})" ---------- ---------- ---------- -------------- ------------ -------
row() {
  printf '| %-32s | %8s | %8s | %8s | %12s | %10s | %5s |\n' "$1" "$(f1 "$(get "$2" rps)")" "$(f2 "$(get "$2" p50_ms)")" \
    "$(f2 "$(get "$2" p99_ms)")" "$(f1 "$(get "$2" host_cpu_ms)")" "$(f1 "$(get "$2" cg_cpu_ms)")" "$(get "$2" load)"
}
if [[ $WANT == *" serve "* ]]; then
  row "serve, 1 client every 100 ms" serve.paced
  for c in 1 4 16; do row "serve, $c connection(s)" "serve.$c"; done
fi
for t in "${TOOLS[@]}"; do
  row "$t, 1 worker" "$t.1"
  row "$t, 2 workers" "$t.2"
  [ "$t" != unshare ] || row "$t, 1 worker every 100 ms" "$t.paced"
done
echo "(host CPU: /proc/stat busy time over the level per sandbox, the whole machine's; cg CPU: the tool's own cgroup's)"
# Most of the idle RSS is the two binaries' mapped file pages, whose count
# depends on how the page cache holds them (the same binary mapped 22 MiB
# copied with cp, 32 MiB as go build wrote it): the anonymous part is the
# daemons' own memory.
[ ! -s "$T/res.rss_peak" ] || echo "daemon RSS (front end + worker): idle $(($(num rss_idle) / 1024)) MiB (anonymous $(($(num rss_anon) / 1024)) MiB), peak $(($(num rss_peak) / 1024)) MiB"

echo
echo "== targets"
s4=$(get serve.4 rps) s16=$(get serve.16 rps)
smin=$(awk -v a="$s4" -v b="$s16" 'BEGIN {if (a == "" || b == "") print ""; else print (a < b ? a : b)}')
b2=$(get bwrap.2 rps) r2=$(get runc.2 rps)
echo "throughput @4/@16: $(f1 "$s4") / $(f1 "$s16") req/s (>= 250: $(meets "$smin" '>=' 250));" \
  "/ bwrap@2: $(ratio "$s4" "$b2") / $(ratio "$s16" "$b2") (>= 0.8x: $(meets "$(awk -v s="$smin" -v b="$b2" 'BEGIN {if (s != "" && b > 0) print s / b}')" '>=' 0.8));" \
  "/ runc@2: $(ratio "$s4" "$r2") / $(ratio "$s16" "$r2") (>= 4x: $(meets "$(awk -v s="$smin" -v b="$r2" 'BEGIN {if (s != "" && b > 0) print s / b}')" '>=' 4))"
p50=$(get serve.paced p50_ms) p99=$(get serve.paced p99_ms) u50=$(get unshare.1 p50_ms)
echo "pooled latency: p50 $(f2 "$p50") ms (< 1: $(meets "$p50" '<' 1)), p99 $(f2 "$p99") ms (< 3: $(meets "$p99" '<' 3));" \
  "p50 / unshare p50: $(ratio "$p50" "$u50") (<= 0.5x: $(meets "$(awk -v a="$p50" -v b="$u50" 'BEGIN {if (a != "" && b > 0) print a / b}')" '<=' 0.5))"
up=$(get unshare.paced p50_ms)
echo "paced pooled p50 / unshare p50, both paced: $(ratio "$p50" "$up") (<= 1.5x: $(meets "$(awk -v a="$p50" -v b="$up" 'BEGIN {if (a != "" && b > 0) print a / b}')" '<=' 1.5));" \
  "/ unshare in a loop: $(ratio "$p50" "$u50")"
c16=$(get serve.16 host_cpu_ms) g16=$(get serve.16 cg_cpu_ms)
echo "CPU per sandbox @16: host $(f1 "$c16") ms, daemon's cgroup $(f1 "$g16") ms (<= 7: $(meets "$c16" '<=' 7) host, $(meets "$g16" '<=' 7) cgroup)"
j=$(get jaild.1 p50_ms) rr=$(get runc.1 p50_ms)
echo "one-shot jaild run / runc run p50: $(ratio "$j" "$rr") (<= 0.8x: $(meets "$(awk -v a="$j" -v b="$rr" 'BEGIN {if (a != "" && b > 0) print a / b}')" '<=' 0.8))"
if [ -s "$T/res.rss_peak" ]; then
  echo "daemon RSS: idle $(($(num rss_idle) / 1024)) MiB (< 40: $(meets "$(($(num rss_idle) / 1024))" '<' 40)), peak $(($(num rss_peak) / 1024)) MiB (< 100: $(meets "$(($(num rss_peak) / 1024))" '<' 100))"
fi

if [[ $WANT == *" policy "* ]]; then
  echo
  echo "== what the policy adds (scripts/bench-policy.sh --daemon)"
  if [ "${BENCH_QUICK:-0}" = 1 ]; then
    pol=(BENCH_N=1000 BENCH_ROUNDS=1 BENCH_REQS=40)
  else
    pol=(BENCH_N=5000 BENCH_ROUNDS=3 BENCH_REQS=100)
  fi
  env "${pol[@]}" JAILD="$JAILD" "$REPO/scripts/bench-policy.sh" --daemon || echo "bench: the policy benchmark failed" >&2
fi

if [[ $WANT == *" density "* ]]; then
  echo
  echo "== with N live sessions ($DENSITY idle sessions, dormant after --session-prestart-idle $DENSITY_IDLE; scripts/sessionbench -density)"
  dens_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null ||
    echo 18081)
  dens_max=$(($(tr , '\n' <<< "$DENSITY" | sort -n | tail -1) + 64))
  printf 'bench:%s\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$T/dens.tokens"
  chmod 0600 "$T/dens.tokens"
  # The daemon in a memory cgroup of its own (v1; nested in it, its
  # sandboxes' cgroups): its charge per idle session is the memory figure.
  # It is made under this shell's own memory cgroup, never beside it: a
  # host (or the machinery that runs this one) may own and limit that one,
  # and the daemon's memory stays charged to it.
  MEMCG=
  if [ "$CGMODE" = v1 ] && [ -d /sys/fs/cgroup/memory ]; then
    own=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
    MEMCG=/sys/fs/cgroup/memory${own%/}/jaild-bench-density.$$
    mkdir -p "$MEMCG"
  fi
  in_cg "$MEMCG"
  # shellcheck disable=SC2086 # BENCH_SERVE_ARGS is a list of flags
  "${IN_CG[@]}" "$JAILD" serve --listen "127.0.0.1:$dens_port" --state-dir "$STATE" --token-file "$T/dens.tokens" --audit-log off \
    --max-sessions "$dens_max" --max-sessions-per-caller "$dens_max" --session-prestart-idle "$DENSITY_IDLE" \
    ${BENCH_SERVE_ARGS:-} > "$T/serve-density.log" 2>&1 &
  DAEMON_PID=$!
  wait_healthy "$dens_port" "$DAEMON_PID"
  # The baseline: a second daemon, the same but for its state dir and
  # outside the memory cgroup, that never holds a session; sessionbench
  # runs each one-shot throughput level on it right after the sessions'
  # daemon, so that their ratio does not carry the machine's drift
  # between levels minutes apart (one daemon at two counts swung by 15%
  # either way on vm3).
  base_args=()
  if [ "$DENSITY_BASELINE" = 1 ]; then
    base_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null ||
      echo 18082)
    # shellcheck disable=SC2086 # BENCH_SERVE_ARGS is a list of flags
    "$JAILD" serve --listen "127.0.0.1:$base_port" --state-dir "$T/state-baseline" --token-file "$T/dens.tokens" --audit-log off \
      --max-sessions "$dens_max" --max-sessions-per-caller "$dens_max" --session-prestart-idle "$DENSITY_IDLE" \
      ${BENCH_SERVE_ARGS:-} > "$T/serve-baseline.log" 2>&1 &
    BASE_PID=$!
    wait_healthy "$base_port" "$BASE_PID"
    base_args=(-baseline "http://127.0.0.1:$base_port")
  fi
  go build -o "$T/sessionbench" ./scripts/sessionbench || die "scripts/sessionbench does not build"
  # The front end and its worker: their mount tables and descriptors.
  dens_pids="$DAEMON_PID,$(pgrep -P "$DAEMON_PID" -f ' worker ' | head -1)"
  "$T/sessionbench" -url "http://127.0.0.1:$dens_port" -token-file "$T/dens.tokens" -density "$DENSITY" \
    -secs "${SECS}s" -n 20 -series "$SERIES" -idle "$DENSITY_IDLE" -pids "$dens_pids" ${MEMCG:+-memcg "$MEMCG"} \
    "${base_args[@]}" 2> "$T/sessionbench.err" ||
    echo "bench: the density benchmark failed; its levels so far:
$(cat "$T/sessionbench.err")
the daemon's log: $(grep -v 'level=INFO' "$T/serve-density.log" | tail -c 1500)" >&2
  stop_daemon
  stop_baseline
  if [ -n "$MEMCG" ]; then
    # The daemon removes its parent cgroup as it stops: whatever is left
    # under its memory cgroup is a sandbox or parent it leaked, which the
    # removal below would otherwise hide.
    if left=$(find "$MEMCG" -mindepth 1 -type d 2> /dev/null) && [ -n "$left" ]; then
      echo "bench: the density daemon left cgroups behind: $(tr '\n' ' ' <<< "$left")" >&2
    fi
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find "$MEMCG" -depth -type d -exec rmdir {} + 2> /dev/null || true
      [ -d "$MEMCG" ] || break
      sleep 0.5
    done
    [ ! -d "$MEMCG" ] || echo "bench: could not remove $MEMCG" >&2
  fi
fi

if [ "${BENCH_GO:-0}" = 1 ]; then
  echo
  echo "== go test -bench . ./jail"
  go test -tags seccomp,urfave_cli_no_docs -run '^$' -bench . -benchtime 2s -count 1 ./jail || echo "bench: the Go benchmarks failed" >&2
fi
