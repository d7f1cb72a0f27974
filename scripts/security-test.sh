#!/usr/bin/env bash
# security-test.sh: the jaild security suite, run against the built binary.
#
#   sudo scripts/security-test.sh            # uses bin/jaild
#   sudo JAILD=/usr/local/bin/jaild scripts/security-test.sh
#
# Every probe runs a real command through `jaild run --json` (fork, memory,
# disk and output bombs; escape attempts) and then checks the sandbox's
# verdict and the HOST: canary files still there, nothing left running, no
# cgroup, state dir or mount left behind. One line per probe, `PASS name` or
# `FAIL name: detail` (`SKIP name: why` where this host lacks the tool a
# probe needs), then `N passed, M failed` alone on the last line. Exit status:
# 0 if nothing failed, 1 if a probe failed, 2 if the suite could not start.
#
# Needs: root, bash, coreutils, procps (ps), util-linux; jq or python3 to read
# the JSON (a grep fallback handles the rest). Inside the sandbox it uses the
# host's /usr (default rootfs "host"): bash, dd, tail, yes, python3 when
# present. jaild's own flags may be set through JAILD_* variables
# (e.g. JAILD_CGROUP_PARENT); JAILD_STATE_DIR is overridden by a private
# state dir so that the leftover checks see only this suite's sandboxes.

# Single-quoted strings below are shell code for the sandbox, not for this shell.
# shellcheck disable=SC2016
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JAILD=${JAILD:-$REPO/bin/jaild}

die() { echo "security-test: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "must run as root: jaild builds sandboxes and the suite inspects every cgroup"
[ -x "$JAILD" ] || die "no jaild binary at $JAILD (build it: scripts/setup.sh, or set JAILD=PATH)"
JAILD=$(realpath "$JAILD")

# Pick the JSON reader once: jq, else python3, else a grep/sed fallback that
# is good enough for the scalar fields and simple strings the probes read.
# SECTEST_JSON=jq|python3|grep forces one.
if [ -n "${SECTEST_JSON:-}" ]; then JSON=$SECTEST_JSON
elif command -v jq > /dev/null; then JSON=jq
elif command -v python3 > /dev/null; then JSON=python3
else JSON="grep"
fi

T=$(mktemp -d -t jaild-sectest.XXXXXX)
# The sandbox's root (an unprivileged host uid) must traverse to the rootfs
# template in the state dir: the private dirs are searchable, not readable.
chmod 0711 "$T"
STATE=$T/state
mkdir -m 0711 "$STATE"
# Host canaries: a secret in root's home (mode 0600), a file under /usr that
# the sandbox sees read-only (what `rm -rf /` inside would hit), and one in
# /var, which the sandbox must not see at all.
SECRET=jaild-canary-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
CANARY_ROOT=$(mktemp /root/jaild-sectest-canary.XXXXXX)
CANARY_USR_DIR=$(mktemp -d /usr/local/share/jaild-sectest.XXXXXX)
CANARY_USR=$CANARY_USR_DIR/canary
CANARY_VAR=$(mktemp /var/tmp/jaild-sectest-canary.XXXXXX)
for f in "$CANARY_ROOT" "$CANARY_USR" "$CANARY_VAR"; do
  printf '%s\n' "$SECRET" > "$f"
  chmod 0600 "$f"
done
chmod 0755 "$CANARY_USR_DIR"
chmod 0644 "$CANARY_USR"   # readable inside: rm must fail on the read-only bind, not on permissions
# The daemon's environment must never reach a sandbox.
export JAILD_SECRET_CANARY=$SECRET
unset JAILD_STATE_DIR JAILD_JSON JAILD_SHELL

BG_PIDS=()   # background processes this suite started
IDS=()       # ids of the sandboxes this suite ran

cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2> /dev/null || true; done
  # A sandbox leaked by a failed probe would keep running under this state
  # dir: a new jaild sweeps orphans whose owner died, so one `true` run
  # cleans up after a crashed one before the dir goes.
  if [ -d "$STATE/containers" ] && [ -n "$(ls -A "$STATE/containers" 2> /dev/null)" ]; then
    timeout 30 "$JAILD" run --state-dir "$STATE" -- true > /dev/null 2>&1 || true
  fi
  rm -f "$CANARY_ROOT" "$CANARY_VAR"
  rm -rf "$CANARY_USR_DIR"
  # --one-file-system: never descend into a mount a broken run left here.
  rm -rf --one-file-system "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0 FAILED=0 SKIPPED=()
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }
skip() { echo "SKIP $1: $2"; SKIPPED+=("$1"); }
# check NAME DETAIL CONDITION...: PASS if the last sandbox ran (jaild gave
# a result) and the condition, a command, succeeds. A sandbox that never ran
# proves nothing, so it fails every probe built on it.
check() {
  local name=$1 detail=$2
  shift 2
  if ran && "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}
# hcheck: the same for a condition on the host alone.
hcheck() {
  local name=$1 detail=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}

# jget FILE KEY: a top-level field of jaild's JSON result: strings raw,
# booleans as true/false, numbers as written; nothing if absent.
jget() {
  case $JSON in
    jq) jq -r --arg k "$2" 'if type == "object" and has($k) then .[$k] else empty end' "$1" 2> /dev/null || true ;;
    python3)
      python3 - "$1" "$2" 2> /dev/null << 'PY' || true
import json, sys
try:
    v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception:
    sys.exit(0)
if v is None:
    sys.exit(0)
if isinstance(v, bool):
    v = "true" if v else "false"
sys.stdout.write(str(v) + "\n")
PY
      ;;
    grep)
      local v
      # A string: take up to the first unescaped quote, then undo \n \t \" \\.
      v=$(grep -o "\"$2\": *\"\\([^\"\\\\]\\|\\\\.\\)*\"" "$1" 2> /dev/null | head -1 |
        sed -e "s/^\"$2\": *\"//" -e 's/"$//') || true
      if [ -n "$v" ]; then printf '%b\n' "${v//\\\"/\"}"; return 0; fi
      grep -o "\"$2\": *[-0-9a-z.]*" "$1" 2> /dev/null | head -1 | sed "s/^\"$2\": *//" || true
      ;;
  esac
}

# Probes with a timeout T must come back (the whole `jaild run`, wall clock)
# within T + SECTEST_SLACK_MS (default 1000). Raise it only on hosts where
# starting any process is slow (an emulated VM).
SLACK=${SECTEST_SLACK_MS:-1000}
[[ $SLACK =~ ^[0-9]+$ ]] || die "SECTEST_SLACK_MS must be a number of milliseconds"

# one LINE: the text squeezed onto one line and cut, for FAIL details.
one() { tr '\n\t' '  ' | cut -c1-"${2:-160}"; }

# jrun NAME [jaild run flags...] -- COMMAND...: runs one sandbox with a
# private state dir. Sets RC (jaild's exit code), WALL_MS, J (the JSON file),
# OUT and ERR (the command's stdout and stderr from the JSON), and DETAIL (a
# one-line summary for FAIL lines). jaild itself is bounded by a watchdog
# well above the sandbox timeout, so a hung jaild fails the probe instead of
# the suite.
jrun() {
  local name=$1 t0 t1 id
  shift
  J=$T/$name.json
  t0=$(date +%s%N)
  set +e
  timeout -k 5 120 "$JAILD" run --json --state-dir "$STATE" "$@" > "$J" 2> "$T/$name.err" < /dev/null
  RC=$?
  set -e
  t1=$(date +%s%N)
  WALL_MS=$(((t1 - t0) / 1000000))
  OUT=$(jget "$J" stdout)
  ERR=$(jget "$J" stderr)
  id=$(jget "$J" id)
  [ -z "$id" ] || IDS+=("$id")
  DETAIL="rc=$RC wall=${WALL_MS}ms"
  [ -s "$J" ] || DETAIL+=" no-json jaild-stderr='$(one < "$T/$name.err")'"
  local k
  for k in exit_code signal timed_out oom_killed pids_limit_hit duration_ms; do
    DETAIL+=" $k=$(jget "$J" $k)"
  done
  DETAIL+=" stdout='$(printf '%s' "$OUT" | one 100)' stderr='$(printf '%s' "$ERR" | one 100)'"
}
is_true() { [ "$(jget "$J" "$1")" = true ]; }
ran() { [ -n "$(jget "$J" id)" ]; }

# Snapshots of the host before any sandbox: processes running this binary
# (a concurrent daemon's are not ours), cgroup directories that look like
# jaild's, and mounts.
jaild_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2> /dev/null)" = "$JAILD" ] && echo "${p#/proc/}"
  done
  return 0
}
uuid_re='[0-9a-f]\{8\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{4\}-[0-9a-f]\{12\}'
jaild_cgroups() {
  find /sys/fs/cgroup -mindepth 1 -type d 2> /dev/null |
    grep -e jaild -e "/$uuid_re\$" | sort || true
}
jaild_pids | sort > "$T/pids.before"
jaild_cgroups > "$T/cgroups.before"
grep -c . /proc/self/mountinfo > "$T/mounts.before" || true

echo "security-test: jaild=$JAILD json=$JSON state=$STATE"

# --- sanity: without it every other FAIL is noise -------------------------
jrun sanity -- echo hello
if [ "$RC" = 0 ] && [ "$OUT" = hello ]; then pass sanity_echo
else fail sanity_echo "$DETAIL (is the jail working on this host? try: $JAILD doctor)"; fi

# --- resource bombs --------------------------------------------------------
# dash (Debian's /bin/sh) rejects ':' as a function name, so the classic bomb
# runs under bash. The shell (PID 1) then blocks on a FIFO read, a builtin
# that needs no fork: were it to exit, the kernel would end the pid namespace
# and the bomb with it, maybe before it reached the limit.
jrun forkbomb --timeout 3s --pids 64 -- bash -c 'mkfifo /tmp/p; exec 3<> /tmp/p; :(){ :|:& };:; read -u 3'
check fork_bomb_pids_limit_hit "$DETAIL" is_true pids_limit_hit
check fork_bomb_timed_out "$DETAIL" is_true timed_out
check fork_bomb_returns_in_time "$DETAIL (want <= $((3000 + SLACK))ms)" [ "$WALL_MS" -le $((3000 + SLACK)) ]
# The bare bomb: PID 1 returns at once and the kernel kills the rest.
jrun forkbomb_bare --timeout 3s --pids 64 -- bash -c ':(){ :|:& };:'
if ran && [ "$WALL_MS" -le $((3000 + SLACK)) ] && [ "$RC" != 119 ]; then pass fork_bomb_bare_returns_in_time
else fail fork_bomb_bare_returns_in_time "$DETAIL (want <= $((3000 + SLACK))ms)"; fi
# A bomb whose processes wait for their children holds pids.max until the
# timeout: jaild must still kill every one of them on time.
jrun forkbomb_tree --timeout 3s --pids 64 -- bash -c 'f(){ f & f & wait; }; f'
check fork_bomb_tree_pids_limit_hit "$DETAIL" is_true pids_limit_hit
check fork_bomb_tree_timed_out "$DETAIL" is_true timed_out
check fork_bomb_tree_returns_in_time "$DETAIL (want <= $((3000 + SLACK))ms)" [ "$WALL_MS" -le $((3000 + SLACK)) ]

jrun cpuspin --timeout 2s --shell 'yes > /dev/null'
check cpu_spin_timed_out "$DETAIL" is_true timed_out
check cpu_spin_exit_124 "$DETAIL" [ "$RC" = 124 ]
if ran && [ "$WALL_MS" -ge 2000 ] && [ "$WALL_MS" -le $((2000 + SLACK)) ]; then pass cpu_spin_killed_at_timeout
else fail cpu_spin_killed_at_timeout "$DETAIL (want 2000..$((2000 + SLACK))ms)"; fi

jrun oomtail --memory 64M --timeout 30s -- tail /dev/zero
check oom_tail_oom_killed "$DETAIL" is_true oom_killed
check oom_tail_exit_123 "$DETAIL" [ "$RC" = 123 ]

# String doubling in the shell: 64 MiB after 26 rounds.
jrun membomb_sh --memory 64M --timeout 30s --shell 's=x; while :; do s=$s$s; done'
check memory_bomb_shell_oom_killed "$DETAIL" is_true oom_killed
if [ -x /usr/bin/python3 ]; then
  # b"\1" * n is written byte by byte, so every page is charged (a zeroed
  # bytearray may stay unbacked).
  jrun membomb_py --memory 64M --timeout 30s -- \
    /usr/bin/python3 -c 'b = [b"\1" * (1 << 20) for _ in iter(int, 1)]'
  check memory_bomb_python_oom_killed "$DETAIL" is_true oom_killed
else
  skip memory_bomb_python_oom_killed "no /usr/bin/python3 on the host (the sandbox's /usr)"
fi

for d in work tmp; do
  jrun "fill_$d" --tmpfs-size 16M --timeout 30s \
    --shell "dd if=/dev/zero of=/$d/f bs=1M count=64; stat -c %s /$d/f"
  check "tmpfs_fill_${d}_enospc" "$DETAIL" grep -q 'No space left' <<< "$ERR"
  # `[` parses the number strictly: sandbox output never reaches arithmetic.
  if ran && [ "${OUT:-x}" -le $((16 << 20)) ] 2> /dev/null; then pass "tmpfs_fill_${d}_capped"
  else fail "tmpfs_fill_${d}_capped" "$DETAIL (want size <= 16 MiB)"; fi
done

jrun outflood --timeout 3s --max-output 64K -- yes
check output_flood_truncated "$DETAIL" is_true stdout_truncated
check output_flood_capped "stdout kept ${#OUT} bytes (want <= 2*64K + marker)" [ "${#OUT}" -le $((128 * 1024 + 512)) ]
check output_flood_returns_in_time "$DETAIL (want <= $((3000 + SLACK))ms)" [ "$WALL_MS" -le $((3000 + SLACK)) ]

# --- the host survives `rm -rf /` -------------------------------------------
usr_count() { find /usr/bin /usr/lib -maxdepth 1 | wc -l; }
before=$(usr_count)
jrun rmrf --timeout 60s -- rm -rf --no-preserve-root /
after=$(usr_count)
if ran && [ "$(cat "$CANARY_USR" 2> /dev/null)" = "$SECRET" ] && [ "$(cat "$CANARY_ROOT")" = "$SECRET" ] &&
  [ "$(cat "$CANARY_VAR")" = "$SECRET" ] && [ "$before" = "$after" ] &&
  [ -s /etc/passwd ] && [ -x "$JAILD" ] && [ -d "$STATE" ]; then
  pass rm_rf_root_host_untouched
else
  fail rm_rf_root_host_untouched "canaries or /usr changed: /usr entries $before -> $after; $DETAIL"
fi
check rm_rf_root_refused_read_only "$DETAIL" grep -q 'Read-only file system' <<< "$ERR"
# The /usr canary is visible inside (read-only bind): removing it must fail.
jrun rmcanary --shell "cat $CANARY_USR && rm -rf $CANARY_USR_DIR; test -e $CANARY_USR && echo STILL-THERE"
if ran && [ "$RC" = 0 ] && [ "$(tail -1 <<< "$OUT")" = STILL-THERE ] && [ -e "$CANARY_USR" ]; then
  pass rm_usr_canary_refused
else fail rm_usr_canary_refused "$DETAIL"; fi

# --- escape attempts ---------------------------------------------------------
jrun canary --shell "cat /root/${CANARY_ROOT##*/}; cat /var/tmp/${CANARY_VAR##*/}"
if ran && [ "${OUT/$SECRET/}" = "$OUT" ] && [ "${ERR/$SECRET/}" = "$ERR" ] && [ "$RC" != 0 ]; then
  pass host_root_canary_unreadable
else fail host_root_canary_unreadable "$DETAIL"; fi
jrun var --shell "test -e /var/tmp/${CANARY_VAR##*/} && echo VISIBLE; test -e /var/tmp && ls -A /var/tmp; true"
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass host_var_invisible; else fail host_var_invisible "$DETAIL"; fi

jrun pids -- ls /proc
n=$(grep -c '^[0-9][0-9]*$' <<< "$OUT" || true)
if ran && [ "$RC" = 0 ] && [ "$n" -le 2 ]; then pass host_pids_invisible
else fail host_pids_invisible "$n pids in /proc (want <= 2; the host has $(find /proc -maxdepth 1 -name "[0-9]*" | wc -l)); $DETAIL"; fi
jrun ps -- ps -e -o pid=,comm=
n=$(grep -c . <<< "$OUT" || true)
if ran && [ "$RC" = 0 ] && [ "$n" -le 2 ]; then pass host_pids_invisible_ps
else fail host_pids_invisible_ps "$n processes (want <= 2); $DETAIL"; fi

jrun netdev -- cat /proc/net/dev
ifaces=$(tail -n +3 <<< "$OUT" | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')
net_only_lo=false
if ran && [ "$RC" = 0 ] && [ "$ifaces" = "lo " ]; then net_only_lo=true; fi
hcheck network_only_loopback "interfaces: '$ifaces'; $DETAIL" $net_only_lo
if [ -x /usr/bin/ip ] || [ -x /usr/sbin/ip ]; then
  jrun iplink --shell 'ip -o link | cut -d: -f2'
  check network_only_loopback_ip "$DETAIL" [ "$(tr -d ' ' <<< "$OUT")" = lo ]
else
  skip network_only_loopback_ip "no ip(8) in /usr"
fi
# Only try to reach an outside address once the sandbox has shown it has no
# interface but lo: then the connect cannot put a packet on any wire.
if $net_only_lo; then
  jrun connect -- timeout 5 bash -c 'exec 3<> /dev/tcp/1.1.1.1/53 && echo CONNECTED'
  if ran && [ "$OUT" != CONNECTED ] && [ "$RC" != 0 ]; then pass network_connect_outside_fails
  else fail network_connect_outside_fails "$DETAIL"; fi
else
  fail network_connect_outside_fails "not attempted: the sandbox has interfaces besides lo ($ifaces)"
fi
# The host's loopback belongs to another network namespace: a listener on the
# host's 127.0.0.1 must be unreachable from inside.
if command -v python3 > /dev/null; then
  python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); s.settimeout(60)
print(s.getsockname()[1], flush=True)
try:
    while True: s.accept()[0].close()
except OSError:
    pass' > "$T/port" &
  BG_PIDS+=($!)
  for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
  port=$(cat "$T/port")
  if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
    jrun hostlo -- timeout 5 bash -c "exec 3<> /dev/tcp/127.0.0.1/$port && echo CONNECTED"
    if ran && [ "$OUT" != CONNECTED ] && [ "$RC" != 0 ]; then pass host_loopback_unreachable
    else fail host_loopback_unreachable "$DETAIL"; fi
  else
    fail host_loopback_unreachable "the host listener on 127.0.0.1:$port does not answer the host itself"
  fi
else
  skip host_loopback_unreachable "no python3 on the host for a listener"
fi

# --- egress: a sandbox given network has only the proxy ------------------------
# jaild run --egress-allow (served by jaild-server next to jaild). Every
# address below is in a documentation range (RFC 5737) or link-local, so a
# broken jail could not reach a real host; and the proxy's refusals happen
# before it dials anything.
EGRESS=(--egress-allow allowed.test:80 --egress-allow metadata.test:80
  --egress-resolve allowed.test=192.0.2.80 --egress-resolve metadata.test=169.254.169.254)
if [ -x "$(dirname "$JAILD")/jaild-server" ] && [ -x /usr/bin/python3 ]; then
  jrun egress_dns "${EGRESS[@]}" -- python3 -c '
import socket
for n in ("allowed.test", "example.com"):
    try:
        socket.getaddrinfo(n, 80); print("resolved", n)
    except socket.gaierror:
        pass
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"q", ("192.0.2.53", 53)); print("udp sent")
except OSError:
    pass
t = socket.socket()
t.settimeout(3)
try:
    t.connect(("192.0.2.53", 53)); print("tcp connected")
except OSError:
    pass
print("proxy", __import__("os").environ.get("HTTPS_PROXY"))'
  check egress_no_dns "$DETAIL" [ "$OUT" = "proxy http://127.0.0.1:3128" ]
  jrun egress_direct "${EGRESS[@]}" --shell 'curl -sS --noproxy "*" --max-time 3 http://192.0.2.80/ 2>&1; echo "rc=$?"'
  check egress_no_direct_egress "$DETAIL" grep -q '^rc=7$' <<< "$OUT"
  jrun egress_metadata "${EGRESS[@]}" --shell 'curl -s -w " %{http_code}" http://metadata.test/latest/meta-data/; echo; curl -s -w " %{http_code}" http://169.254.169.254/latest/meta-data/'
  # The proxy's one-line reason ends in a newline, then curl's status.
  meta_refused() {
    local o
    o=$(tr '\n' ' ' <<< "$OUT")
    grep -q 'is refused: 169.254.169.254 is link-local (cloud metadata) *403' <<< "$o" &&
      grep -q '169.254.169.254:80 is not in the egress allowlist *403' <<< "$o"
  }
  check egress_metadata_refused "$DETAIL" meta_refused
  check egress_denials_counted "$DETAIL" [ "$(jget "$J" egress_denied)" = 2 ]
  # IPv6 forms that embed a refused IPv4 address (RFC 4291's compatible
  # and mapped, RFC 6145's translated, RFC 6052's NAT64) are that address.
  jrun egress_embedded_v4 --egress-allow compat.test:80 --egress-allow transl.test:80 --egress-allow nat64.test:80 \
    --egress-resolve compat.test=::127.0.0.1 --egress-resolve transl.test=::ffff:0:7f00:1 \
    --egress-resolve nat64.test=64:ff9b::a9fe:a9fe \
    --shell 'for h in compat transl nat64; do curl -s -w " %{http_code}\n" http://$h.test/; done'
  embedded_refused() {
    [ "$(grep -c 'is refused: .* form of \(127.0.0.1, loopback\|169.254.169.254, link-local\).* 403$' <<< "$(paste -d' ' - - <<< "$OUT")")" = 3 ]
  }
  check egress_embedded_v4_refused "$DETAIL" embedded_refused
else
  skip egress "no jaild-server next to $JAILD, or no python3"
fi

jrun uidmap --shell 'cat /proc/self/uid_map /proc/self/gid_map; echo "uid=$(id -u) gid=$(id -g)"'
maps=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9]+ *$' <<< "$OUT" || true)
if ran && [ -n "$maps" ] && [ -z "$(awk '$2 == 0' <<< "$maps")" ]; then pass userns_maps_to_unprivileged_host_ids
else fail userns_maps_to_unprivileged_host_ids "$DETAIL"; fi
ids=$(grep '^uid=' <<< "$OUT" || true)
if ran && [ -n "$ids" ] && [ "$ids" != "uid=0 gid=0" ] && [ "${ids#uid=0 }" = "$ids" ]; then pass runs_as_unprivileged_user
else fail runs_as_unprivileged_user "$DETAIL"; fi
# The same seen from the host: the sandboxed process's uid is not 0.
mark=3.$$
timeout -k 5 60 "$JAILD" run --state-dir "$STATE" --timeout 20s -- sleep "$mark" > /dev/null 2>&1 &
bgrun=$!
BG_PIDS+=("$bgrun")
hostuid=
for _ in $(seq 100); do
  hostuid=$(ps -eo uid=,args= | awk -v m="sleep $mark" '$2 == "sleep" && $2 " " $3 == m {print $1; exit}')
  [ -n "$hostuid" ] && break
  sleep 0.05
done
wait "$bgrun" || true
if [ -n "$hostuid" ] && [ "$hostuid" != 0 ]; then pass host_sees_unprivileged_uid
else fail host_sees_unprivileged_uid "host uid of the sandboxed sleep: '${hostuid:-not found}'"; fi

jrun status -- cat /proc/self/status
capfield() { awk -v f="$1:" '$1 == f {print $2}' <<< "$OUT"; }
for c in CapEff CapPrm CapInh CapAmb CapBnd; do
  check "capabilities_${c}_zero" "$c=$(capfield $c); rc=$RC" [ "$(capfield $c)" = 0000000000000000 ]
done
check no_new_privs "NoNewPrivs=$(capfield NoNewPrivs)" [ "$(capfield NoNewPrivs)" = 1 ]
check seccomp_filter_on "Seccomp=$(capfield Seccomp)" [ "$(capfield Seccomp)" = 2 ]

jrun rofs --shell 'for f in /usr/x /x /etc/x /bin/x /work/x /tmp/x; do touch $f 2>/dev/null && echo "wrote $f"; done; true'
check readonly_root "$DETAIL (want only /work/x and /tmp/x written)" \
  [ "$(tr '\n' ' ' <<< "$OUT")" = "wrote /work/x wrote /tmp/x " ]

jrun mount --shell 'mount -t tmpfs none /tmp 2>&1 && echo MOUNTED; mount --bind /work /tmp 2>&1 && echo MOUNTED; true'
if ran && [ "${OUT/MOUNTED/}" = "$OUT" ]; then pass mount_denied; else fail mount_denied "$DETAIL"; fi
jrun unshare --shell 'unshare -U true && echo UNSHARED; unshare -Ur true && echo UNSHARED; unshare -m true && echo UNSHARED; true'
if ran && [ "${OUT/UNSHARED/}" = "$OUT" ]; then pass unshare_user_ns_denied; else fail unshare_user_ns_denied "$DETAIL"; fi

# Syscalls a sandbox never needs, called directly (x86_64 numbers) so the
# probe needs neither keyutils nor bpftool. Each must fail; the ones an
# unprivileged host user could make (keyctl, add_key, perf_event_open with
# perf_event_paranoid <= 2, user namespaces, user-mode userfaultfd, ptrace)
# show that seccomp, not only the missing capabilities, closes them.
if [ -x /usr/bin/python3 ] && [ "$(uname -m)" = x86_64 ]; then
  jrun syscalls -- /usr/bin/python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
L = ctypes.c_long
attr = ctypes.create_string_buffer(128)
ctypes.c_uint32.from_buffer(attr, 0).value = 1      # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK
ctypes.c_uint32.from_buffer(attr, 4).value = 128    # attr size
ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 5) | (1 << 6)  # exclude_kernel, exclude_hv
bpfattr = ctypes.create_string_buffer(128)
for off, v in ((0, 2), (4, 4), (8, 4), (12, 1)):    # BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry
    ctypes.c_uint32.from_buffer(bpfattr, off).value = v
calls = [
    ("keyctl", (L(250), L(0), L(-3), L(1))),         # KEYCTL_GET_KEYRING_ID(session, create)
    ("keyctl_x32", (L(0x40000000 | 250), L(0), L(-3), L(1))),
    ("add_key", (L(248), b"user", b"jaild", b"x", L(1), L(-3))),
    ("bpf", (L(321), L(0), bpfattr, L(128))),        # BPF_MAP_CREATE
    ("perf_event_open", (L(298), attr, L(0), L(-1), L(-1), L(0))),
    ("unshare_newuser", (L(272), L(0x10000000))),
    ("clone_newuser", (L(56), L(0x10000000 | 17), L(0), L(0), L(0), L(0))),
    ("mount", (L(165), b"none", b"/tmp", b"tmpfs", L(0), L(0))),
    ("init_module", (L(175), L(0), L(0), b"")),
    ("kexec_load", (L(246), L(0), L(0), L(0), L(0))),
    ("userfaultfd", (L(323), L(1))),                 # UFFD_USER_MODE_ONLY
    ("ptrace_traceme", (L(101), L(0), L(0), L(0), L(0))),
    ("io_uring_setup", (L(425), L(1), ctypes.create_string_buffer(120))),
]
# Each call in a child of its own: a filter that kills (SIGSYS) instead of
# failing the call must not take the other probes with it. A kill counts as
# denied; only a successful call is an escape.
for name, args in calls:
    pid = os.fork()
    if pid == 0:
        r = sc(*args)
        e = ctypes.get_errno()
        if r == 0 and name == "clone_newuser":
            os._exit(0)                              # the child of a clone that should not exist
        print(name, r, os.strerror(e) if r < 0 else "ok", flush=True)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        print(name, -1, "killed by signal %d" % os.WTERMSIG(st), flush=True)
'
  for s in keyctl keyctl_x32 add_key bpf perf_event_open unshare_newuser clone_newuser mount \
    init_module kexec_load userfaultfd ptrace_traceme io_uring_setup; do
    line=$(grep "^$s " <<< "$OUT" || true)
    if ran && [ -n "$line" ] && [ "$(cut -d' ' -f2 <<< "$line")" = -1 ]; then pass "syscall_${s}_denied"
    else fail "syscall_${s}_denied" "${line:-no result; $DETAIL}"; fi
  done
else
  skip syscalls_denied "no /usr/bin/python3 on an x86_64 host to make raw syscalls"
fi
# The seccomp filter is an allowlist. Socket families: the network namespace
# does not cover AF_VSOCK (a vsock socket reaches the host VM's vsock port
# space) nor give the sandbox AF_PACKET or AF_ALG; they must fail with
# EAFNOSUPPORT while AF_INET works. personality may only take safe values,
# and a syscall newer than the filter (file_getattr, Linux 6.17) must get
# ENOSYS, not run. x86_64 numbers, as above.
if [ -x /usr/bin/python3 ] && [ "$(uname -m)" = x86_64 ]; then
  jrun seccomp_args -- /usr/bin/python3 -c '
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
L = ctypes.c_long
def sock(fam, typ):
    socket.socket(fam, typ).close()
    return 0
def raw(*args):
    r = sc(*args)
    if r < 0:
        raise OSError(ctypes.get_errno(), "")
    return r
probes = [
    ("af_vsock", lambda: sock(socket.AF_VSOCK, socket.SOCK_STREAM)),
    ("af_packet", lambda: sock(socket.AF_PACKET, socket.SOCK_RAW)),
    ("af_alg", lambda: sock(socket.AF_ALG, socket.SOCK_SEQPACKET)),
    ("af_bluetooth", lambda: sock(socket.AF_BLUETOOTH, socket.SOCK_STREAM)),
    ("af_inet", lambda: sock(socket.AF_INET, socket.SOCK_STREAM)),
    ("personality_read_implies_exec", lambda: raw(L(135), L(0x0400000))),
    ("personality_addr_no_randomize", lambda: raw(L(135), L(0x0040000))),
    ("personality_query", lambda: raw(L(135), L(0xffffffff))),
    ("modify_ldt", lambda: raw(L(154), L(0), ctypes.create_string_buffer(64), L(64))),
    ("pidfd_getfd", lambda: raw(L(438), L(raw(L(434), L(os.getpid()), L(0))), L(0), L(0))),
    ("newer_than_filter", lambda: raw(L(468), L(-100), b"/work", ctypes.create_string_buffer(64), L(24), L(0))),
]
for name, f in probes:
    pid = os.fork()
    if pid == 0:
        try:
            f()
            print(name, "ok", flush=True)
        except OSError as e:
            print(name, errno.errorcode.get(e.errno, e.errno), flush=True)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        print(name, "killed-by-signal-%d" % os.WTERMSIG(st), flush=True)
'
  # want CHECK PROBE RESULT: PASS if PROBE printed RESULT.
  want() {
    local line
    line=$(grep "^$2 " <<< "$OUT" || true)
    if ran && [ "$line" = "$2 $3" ]; then pass "$1"
    else fail "$1" "${line:-no result; $DETAIL} (want $3)"; fi
  }
  want vsock_socket_refused af_vsock EAFNOSUPPORT
  want packet_socket_refused af_packet EAFNOSUPPORT
  want alg_socket_refused af_alg EAFNOSUPPORT
  want bluetooth_socket_refused af_bluetooth EAFNOSUPPORT
  want inet_socket_allowed af_inet ok
  want personality_read_implies_exec_refused personality_read_implies_exec EPERM
  want personality_addr_no_randomize_refused personality_addr_no_randomize EPERM
  want personality_query_allowed personality_query ok
  want syscall_modify_ldt_denied modify_ldt EPERM
  want syscall_pidfd_getfd_denied pidfd_getfd EPERM
  want syscall_newer_than_filter_enosys newer_than_filter ENOSYS
else
  skip seccomp_arguments "no /usr/bin/python3 on an x86_64 host to make raw syscalls"
fi
if [ -x /usr/bin/keyctl ]; then
  jrun keyctl --shell 'keyctl add user jaild x @s && echo ADDED; true'
  if ran && [ "${OUT/ADDED/}" = "$OUT" ]; then pass keyctl_tool_denied; else fail keyctl_tool_denied "$DETAIL"; fi
fi

jrun hostname -- cat /proc/sys/kernel/hostname
host_name=$(cat /proc/sys/kernel/hostname)
if ran && [ -n "$OUT" ] && [ "$OUT" != "$host_name" ]; then pass hostname_not_hosts
else fail hostname_not_hosts "inside '$OUT', host '$host_name'"; fi

jrun env -- env
if ran && [ -n "$OUT" ] && [ "${OUT/JAILD_SECRET_CANARY/}" = "$OUT" ] && [ "${OUT/$SECRET/}" = "$OUT" ]; then
  pass daemon_env_not_leaked
else fail daemon_env_not_leaked "$DETAIL"; fi
if ran && [ -n "$OUT" ] && ! grep -qx 'HOME=/root' <<< "$OUT"; then pass env_home_not_root
else fail env_home_not_root "$DETAIL"; fi

jrun etc --shell 'for f in /etc/shadow /etc/gshadow /etc/sudoers /etc/ssh /etc/ssl/private /etc/machine-id; do test -e $f && echo "present $f"; done; true'
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass etc_secrets_absent; else fail etc_secrets_absent "$DETAIL"; fi
jrun homes --shell 'for d in /home /root; do test -d $d && ls -A $d; done; true'
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass home_and_root_empty; else fail home_and_root_empty "$DETAIL"; fi

jrun devs --shell 'for f in /dev/mem /dev/kmem /dev/port /dev/kmsg /dev/vda /dev/sda /dev/nvme0n1 /dev/loop0 /dev/fuse; do test -e $f && echo "present $f"; done; find /dev -type b 2>/dev/null; true'
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass no_host_devices; else fail no_host_devices "$DETAIL"; fi
# Writes back the current value: harmless should the write ever be allowed.
jrun procsys --shell 'echo h > /proc/sysrq-trigger 2>/dev/null && echo "wrote sysrq"; cp /proc/sys/kernel/core_pattern /tmp/c; cat /tmp/c > /proc/sys/kernel/core_pattern 2>/dev/null && echo "wrote core_pattern"; true'
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass proc_sys_readonly; else fail proc_sys_readonly "$DETAIL"; fi
jrun cgroupfs --shell 'test -d /sys/fs/cgroup || exit 0; mkdir /sys/fs/cgroup/escape 2>/dev/null && echo MKDIR; echo 1 > /sys/fs/cgroup/cgroup.procs 2>/dev/null && echo MOVED; true'
if ran && [ "$RC" = 0 ] && [ -z "$OUT" ]; then pass cgroupfs_not_writable; else fail cgroupfs_not_writable "$DETAIL"; fi

# Background jobs die with the command (the command is its pid namespace's
# init), and jaild does not wait for them.
bgmark=60.$$
jrun bgjob --shell "sleep $bgmark > /dev/null 2>&1 & echo started"
sleep 0.2
bgleft=$(pgrep -cfx "sleep $bgmark" || true)
if ran && [ "$OUT" = started ] && [ "$WALL_MS" -lt 5000 ] && [ "$bgleft" = 0 ]; then pass background_job_killed
else fail background_job_killed "$DETAIL; $bgleft left on the host"; fi

# Concurrent sandboxes: each its own /work and /tmp, its own uid range.
par=()
for i in 1 2 3 4 5 6; do
  timeout -k 5 60 "$JAILD" run --json --state-dir "$STATE" --env "TOKEN=tok$i" --shell \
    'echo $TOKEN > /work/t; echo $TOKEN > /tmp/t; sleep 1; cat /work/t /tmp/t; ls /work; ls /tmp; head -1 /proc/self/uid_map' \
    > "$T/par$i.json" 2> "$T/par$i.err" < /dev/null &
  par+=($!)
  BG_PIDS+=($!)
done
for p in "${par[@]}"; do wait "$p" || true; done
cross=
ranges=
for i in 1 2 3 4 5 6; do
  out=$(jget "$T/par$i.json" stdout)
  id=$(jget "$T/par$i.json" id)
  [ -z "$id" ] || IDS+=("$id")
  if [ "$(head -4 <<< "$out" | tr '\n' ' ')" != "tok$i tok$i t t " ]; then
    cross+=" sandbox $i: '$(one <<< "$out")' $(one < "$T/par$i.err")"
  fi
  ranges+="$(sed -n 5p <<< "$out" | awk '{print $2, $3}')"$'\n'
done
hcheck parallel_no_cross_talk "${cross:-}" [ -z "$cross" ]
# Ranges [start, start+size), sorted by start, must not overlap.
overlap=$(grep . <<< "$ranges" | sort -n | awk 'NR > 1 && $1 < end {print "overlap at " $1} {end = $1 + $2}')
if [ "$(grep -c . <<< "$ranges")" = 6 ] && [ -z "$overlap" ]; then pass parallel_uid_ranges_disjoint
else fail parallel_uid_ranges_disjoint "ranges: $(one <<< "$ranges") $overlap"; fi

# serve LOG FLAGS...: starts `jaild serve` on a free loopback port with this
# suite's state dir and FLAGS, its log in $T/LOG, and returns once it
# answers. Sets PORT and SERVE_PID (a background process of this suite).
serve() {
  local log=$1
  shift
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$JAILD" serve --listen "127.0.0.1:$PORT" --state-dir "$STATE" --audit-log off "$@" > "$T/$log" 2>&1 &
  SERVE_PID=$!
  BG_PIDS+=("$SERVE_PID")
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/openapi.yaml" && break; sleep 0.1; done
}

# --- the daemon against web pages (DNS rebinding) ----------------------------
# A page on attacker.example whose name rebinds to 127.0.0.1 sends the
# attacker's Host and Origin: every endpoint must refuse it, and only a
# loopback Host runs anything.
if command -v curl > /dev/null; then
  serve serve.log --pool 0
  rebind() {
    curl -s -o "$T/rebind.out" -w '%{http_code}' -X "$1" "http://127.0.0.1:$PORT$2" -H "Host: ${3:-attacker.example:$PORT}" \
      ${4:+-H "Origin: $4"} -H 'Content-Type: application/json' -d "{\"command\":\"echo $SECRET-rebound\"}" 2> /dev/null || true
  }
  for ep in "POST /run" "POST /raw" "GET /metrics" "GET /healthz" "POST /mcp"; do
    code=$(rebind $ep "" "http://attacker.example:$PORT")
    hcheck "rebinding_refused_${ep#* /}" "status $code: $(one < "$T/rebind.out")" [ "$code" = 403 ]
  done
  code=$(rebind POST /run "localhost:$PORT" "http://attacker.example")
  hcheck rebinding_origin_refused "status $code: $(one < "$T/rebind.out")" [ "$code" = 403 ]
  code=$(rebind POST /run "127.0.0.1:$PORT")
  served() { [ "$code" = 200 ] && grep -q "$SECRET-rebound" "$T/rebind.out"; }
  hcheck loopback_host_served "status $code: $(one < "$T/rebind.out")" served
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true
else
  skip rebinding "curl is not installed"
fi

# --- trust: policy input --------------------------------------------------------
# A policy allowing only ls, echo and cat (each as the file of its name the
# sandbox cannot change) and every request but a files-API write below
# /work/ro. The policy must decide on what really runs in a session: an
# uploaded /work/bin/ls first in the session's PATH is /work/bin/ls, and
# writable; a state report forged on fd 3 carries no loader variable; the
# files API is the policy's to deny.
if command -v curl > /dev/null; then
  mkdir -p "$T/policy"
  cat > "$T/policy/main.rego" <<'REGO'
package sandbox.main

allowed := {"ls", "echo", "cat"}

ok(c) if {
	allowed[c.command]
	not c.writable
	endswith(c.path, concat("", ["/", c.command]))
}

allow if {
	not input.shell
	ok(input)
}

allow if {
	input.shell
	not input.shell.dynamic
	every c in input.shell.commands {
		ok(c)
	}
}

default allow_action := true

allow_action := false if {
	input.action == "files.write"
	startswith(input.file, "/work/ro/")
}
REGO
  serve serve-policy.log --pool 0 --policy-dir "$T/policy" --decision-log "$T/decisions.log"
  api() { # METHOD PATH [curl args...]: the body to $T/api.out, the status on stdout
    local m=$1 p=$2; shift 2
    curl -s -o "$T/api.out" -w '%{http_code}' -X "$m" "http://127.0.0.1:$PORT$p" "$@" 2> /dev/null || true
  }
  json() { api "$1" "$2" -H 'Content-Type: application/json' -d "$3"; }
  json POST /sessions '{}' > /dev/null
  sid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("id",""))' "$T/api.out" 2> /dev/null || true)
  if [ -n "$sid" ]; then
    api PUT "/sessions/$sid/files/bin/ls?mode=0755" --data-binary @/usr/bin/id > /dev/null
    json PATCH "/sessions/$sid" '{"env":{"PATH":"/work/bin:/usr/bin:/bin"}}' > /dev/null
    denied() { [ "$code" = 403 ] && grep -q policy_denied "$T/api.out" && ! grep -q 'uid=' "$T/api.out"; }
    code=$(json POST /run "{\"executable\":\"ls\",\"session_id\":\"$sid\"}")
    hcheck policy_uploaded_ls_denied_argv "status $code: $(one < "$T/api.out")" denied
    code=$(json POST /run "{\"command\":\"ls\",\"session_id\":\"$sid\"}")
    hcheck policy_uploaded_ls_denied_shell "status $code: $(one < "$T/api.out")" denied
    hcheck policy_decision_log_real_path "$(tail -1 "$T/decisions.log" | cut -c1-300)" \
      grep -q '"path":"/work/bin/ls".*"writable":true' "$T/decisions.log"
    json PATCH "/sessions/$sid" '{"env":{"PATH":null}}' > /dev/null
    forged='echo \"jaild-state-v2\\0000/work\\0000export LD_PRELOAD=/work/evil.so\\0000\\c\" >&3; exec ls'
    json POST /run "{\"command\":\"$forged\",\"session_id\":\"$sid\"}" > /dev/null
    forged='echo \"jaild-state-v3\\0000'$(printf '0%.0s' $(seq 32))'\\0000/work\\0000export LD_PRELOAD=/work/evil.so\\0000\\c\" >&3; exec ls'
    json POST /run "{\"command\":\"$forged\",\"session_id\":\"$sid\"}" > /dev/null
    api GET "/sessions/$sid" > /dev/null
    carried() { grep -q LD_PRELOAD "$T/api.out"; }
    hcheck policy_forged_report_carries_nothing "$(one < "$T/api.out")" eval '! carried' 
    code=$(api PUT "/sessions/$sid/files/ro/x" --data-binary x)
    hcheck policy_files_write_denied "status $code: $(one < "$T/api.out")" [ "$code" = 403 ]
    api DELETE "/sessions/$sid" > /dev/null
  else
    fail policy_session_create "$(one < "$T/api.out") $(one < "$T/serve-policy.log")"
  fi
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true
else
  skip policy_input "curl is not installed"
fi

# --- trust: reaping ---------------------------------------------------------
# Every sandbox the daemon starts is waited for, used or not: a session's
# prestarted sandbox at DELETE, one that cannot enter a call's directory, a
# pooled one whose executable is missing. An exited child never waited for
# stays a zombie of the process that started it and keeps its pid charged to
# the daemon's pids budget: with --total-pids 40, sixty sessions would leave
# no pid for any run.
if command -v curl > /dev/null; then
  serve reap.log --pool 1 --total-pids 40
  api() { # METHOD PATH [BODY]: the status, the body in $T/reap.out
    curl -s -o "$T/reap.out" -w '%{http_code}' -X "$1" "http://127.0.0.1:$PORT$2" \
      -H 'Content-Type: application/json' ${3:+-d "$3"} 2> /dev/null || true
  }
  cycles_failed=
  for i in $(seq 60); do
    code=$(api POST /sessions '{}')
    id=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$T/reap.out")
    if [ "$code" != 201 ] || [ -z "$id" ]; then cycles_failed="cycle $i: POST /sessions $code $(one < "$T/reap.out")"; break; fi
    if [ $((i % 10)) = 0 ]; then
      api POST /run "{\"session_id\":\"$id\",\"cwd\":\"/work/no/such\",\"command\":\"pwd\"}" > /dev/null
      api POST /run '{"executable":"no-such-command"}' > /dev/null
    fi
    code=$(api DELETE "/sessions/$id")
    case $code in 200 | 204) ;; *) cycles_failed="cycle $i: DELETE $code $(one < "$T/reap.out")"; break ;; esac
  done
  hcheck reaping_session_cycles "$cycles_failed" [ -z "$cycles_failed" ]
  code=$(api POST /run '{"command":"echo reaped"}')
  runs() { [ "$code" = 200 ] && grep -q '"stdout":"reaped\\n"' "$T/reap.out"; }
  hcheck reaping_run_after_cycles "status $code: $(one < "$T/reap.out")" runs
  # Zombies of the daemon and of its worker (its child), by /proc state Z.
  parents=" $SERVE_PID "
  for p in /proc/[0-9]*; do
    read -r st pp _ < <(sed 's/.*) //' "$p/stat" 2> /dev/null) || continue
    [ "$pp" = "$SERVE_PID" ] && parents+="${p#/proc/} "
  done
  # Teardowns run after the answers (--teardown-backlog): on a loaded host
  # the last cycles' sandboxes may take seconds to be waited for.
  zombies=
  for _ in $(seq 300); do
    zombies=
    for p in /proc/[0-9]*; do
      read -r st pp _ < <(sed 's/.*) //' "$p/stat" 2> /dev/null) || continue
      [ "$st" = Z ] && [[ $parents == *" $pp "* ]] && zombies+="${p#/proc/}(ppid $pp) "
    done
    [ -z "$zombies" ] && break
    sleep 0.1
  done
  hcheck reaping_no_zombies "zombie children of the daemon or its worker: $(one 200 <<< "$zombies")" [ -z "$zombies" ]
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true
else
  skip reaping "curl is not installed"
fi

# --- trust: policy grammar ---
# A policy that allows every command but id and anything dynamic: each
# string below runs id in dash (/run's /bin/sh) or in bash unless the parser
# sees it. Differential through real sandboxes: either jaild denies the
# string, or id did not run (no uid= in its output). Then the policy
# directory is replaced, edited, removed and restored under the daemon.
if command -v curl > /dev/null; then
  POL=$T/policy-grammar
  mkdir -p "$POL"
  cat > "$POL/main.rego" << 'EOF'
package sandbox.main

default allow := false

allow if {
	not input.shell
	not blocked[input.command]
}

allow if {
	input.shell
	not input.shell.dynamic
	every c in input.shell.commands {
		not blocked[c.command]
		not blocked[base(c.path)]
	}
}

base(p) := parts[count(parts) - 1] if parts := split(p, "/")
EOF
  cp "$POL/main.rego" "$T/policy-main.rego"
  printf 'package sandbox.main\n\nblocked contains "id"\n' > "$POL/blocked_id.rego"
  serve serve-policy.log --pool 0 --policy-dir "$POL"
  # prun COMMAND: POST /run; prints the status, leaves the body in $T/prun.json.
  prun() {
    local body
    if [ "$JSON" = jq ]; then body=$(jq -n --arg c "$1" '{command: $c}')
    else body=$(python3 -c 'import json, sys; print(json.dumps({"command": sys.argv[1]}))' "$1"); fi
    curl -s -o "$T/prun.json" -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/run" \
      -H 'Content-Type: application/json' -d "$body" 2> /dev/null || true
  }
  code=$(prun 'echo grammar-ok')
  hcheck policy_allows_plain "status $code: $(one < "$T/prun.json")" grep -q grammar-ok "$T/prun.json"
  code=$(prun id)
  hcheck policy_denies_id "status $code: $(one < "$T/prun.json")" [ "$code" = 403 ]
  missed=
  while IFS= read -r src; do
    code=$(prun "$src")
    if [ "$code" = 200 ] && grep -q 'uid=' <<< "$(jget "$T/prun.json" stdout)$(jget "$T/prun.json" stderr)"; then
      missed+=" [$src]"
    elif [ "$code" != 200 ] && [ "$code" != 403 ]; then
      missed+=" [$src: status $code $(one 80 < "$T/prun.json")]"
    fi
  done << 'EOF'
((id)); echo hi
echo a &>/dev/stderr id
bash -c 'x='\''a[$(id>&2)]'\''; echo $((x))'
sh -c '((id)); echo hi'
bash -c 'x='\''a[$(id>&2)]'\''; [[ $x -eq 0 ]]'
bash -c 'x='\''$(id>&2)'\''; echo ${x@P}'
bash -c 'declare -n r='\''a[$(id>&2)]'\''; echo $r'
bash -c 'printf -v '\''a[$(id>&2)]'\'' x'
bash -c 'a=(1); x='\''a[$(id>&2)]'\''; echo ${a[x]} ${!x}'
bash -c 'PS4='\''$(id>&2)'\''; set -x; true'
eval id
x=i; ${x}d
time id
! id
exec id
command -p id
env id
nohup id
echo x | xargs id
find /tmp -maxdepth 0 -exec id \;
trap id EXIT
alias x=id
echo id | sh
PATH=/nowhere:$PATH; id
EOF
  hcheck policy_grammar_no_miss "ran id:$missed" [ -z "$missed" ]

  # poll SECONDS COMMAND STATUS: /run COMMAND until it answers STATUS.
  poll() {
    local end=$((SECONDS + $1)) code
    while :; do
      code=$(prun "$2")
      [ "$code" = "$3" ] && return 0
      [ "$SECONDS" -ge "$end" ] && return 1
      sleep 0.1
    done
  }
  cp -r "$POL" "$POL.new"
  printf 'package sandbox.main\n\nblocked contains "uname"\n' > "$POL.new/blocked_uname.rego"
  mv "$POL" "$POL.old"
  mv "$POL.new" "$POL"
  hcheck policy_dir_swap_followed "uname still runs after the swap" poll 3 uname 403
  printf 'package sandbox.main\n\nblocked contains "date"\n' > "$POL/blocked_date.rego"
  hcheck policy_edit_after_swap_followed "date still runs after an edit of the swapped-in dir" poll 2 date 403
  rm -rf "$POL" "$POL.old"
  kept() { curl -s "http://127.0.0.1:$PORT/healthz" | grep -q 'keeping this revision' && [ "$(prun date)" = 403 ]; }
  for _ in $(seq 30); do kept && break; sleep 0.1; done
  hcheck policy_missing_keeps_last_good "healthz: $(curl -s "http://127.0.0.1:$PORT/healthz" | one)" kept
  mkdir "$POL"
  cp "$T/policy-main.rego" "$POL/main.rego"
  printf 'package sandbox.main\n\nblocked contains "id"\nblocked contains "hostname"\n' > "$POL/blocked_id.rego"
  restored() { poll 3 hostname 403 && [ "$(prun date)" = 200 ]; }
  hcheck policy_restore_followed "the restored set is not live: hostname runs or date is denied" restored
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true
else
  skip policy_grammar "curl is not installed"
fi

# --- trust: budgets ------------------------------------------------------------
# What the files API writes counts against the sandboxes' budget
# (--total-memory on the parent cgroup), not the daemon's cgroup; a client
# that stops reading a download holds neither its session's DELETE nor
# anything else; a sparse file larger than the workspace is refused, not
# streamed. The daemon gets a parent cgroup of its own, read before and after.
if command -v curl > /dev/null && command -v python3 > /dev/null; then
  CGP=/jaild-sectest-budget-$$
  serve serve-budget.log --cgroup-parent "$CGP" --pool 0 --workspace-size 256M
  BUDGET_PID=$SERVE_PID
  B=http://127.0.0.1:$PORT
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then MEMF=/sys/fs/cgroup$CGP/memory.current
  else MEMF=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$BUDGET_PID/cgroup" | sed 's:/$::')$CGP/memory.usage_in_bytes; fi
  curl -s -o "$T/bsess.json" -X POST "$B/sessions" -H 'Content-Type: application/json' -d '{}' || true
  SID=$(jget "$T/bsess.json" id)
  head -c 96M /dev/urandom > "$T/up96"
  before=$(cat "$MEMF" 2> /dev/null || echo 0)
  code=$(curl -s -o "$T/bput.out" -w '%{http_code}' -T "$T/up96" "$B/sessions/$SID/files/up96" || true)
  after=$(cat "$MEMF" 2> /dev/null || echo 0)
  grew=$(( (after - before) >> 20 ))
  charged() { [ "$code" = 204 ] && [ "$grew" -ge 86 ]; }
  hcheck budget_upload_charged "PUT $code, the sandboxes' parent ($MEMF) grew by $grew MiB for 96 MiB" charged
  curl -s -o /dev/null -X POST "$B/run" -H 'Content-Type: application/json' \
    -d "{\"command\":\"truncate -s 1P /work/sparse && mkdir /work/d && truncate -s 1P /work/d/s\",\"session_id\":\"$SID\"}" || true
  code=$(curl -s -m 20 -o "$T/bsparse.out" -w '%{http_code}' "$B/sessions/$SID/files/sparse" || true)
  hcheck budget_sparse_file_refused "GET of a 1 PiB sparse file: status $code, $(head -c 200 "$T/bsparse.out" | one)" [ "$code" = 409 ]
  code=$(curl -s -m 20 -o "$T/bsparse.out" -w '%{http_code}' -H 'Accept: application/x-tar' "$B/sessions/$SID/files/d" || true)
  hcheck budget_sparse_tar_refused "tar of a 1 PiB sparse file: status $code, $(head -c 200 "$T/bsparse.out" | one)" [ "$code" = 409 ]
  # A download that stops reading after its status line.
  python3 - "$PORT" "$SID" << 'PY' > "$T/bstall.out" 2>&1 &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /sessions/%s/files/up96 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % sys.argv[2].encode())
print(s.recv(64).split(b"\r\n")[0].decode(), flush=True)
time.sleep(60)
PY
  STALL_PID=$!
  BG_PIDS+=("$STALL_PID")
  sleep 1
  t0=$(date +%s%N)
  code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' -X DELETE "$B/sessions/$SID" || true)
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  prompt() { [ "$code" = 204 ] && [ "$ms" -lt 5000 ]; }
  hcheck budget_delete_not_held_by_stalled_download "DELETE: status $code after $ms ms (download: $(one < "$T/bstall.out"))" prompt
  kill "$STALL_PID" 2> /dev/null || true
  wait "$STALL_PID" 2> /dev/null || true
  kill -TERM "$BUDGET_PID" 2> /dev/null || true
  wait "$BUDGET_PID" 2> /dev/null || true
  rm -f "$T/up96"
else
  skip budgets "curl or python3 is not installed"
fi

# --- trust: owners ------------------------------------------------------------
# Two uids on the daemon's unix socket are two callers: one neither sees,
# runs in nor removes the other's session, and each has its own quota. Two
# tokens are two callers to MCP: one's DELETE of the other's MCP session is
# 404, and the session's workspace survives it.
if command -v curl > /dev/null && command -v setpriv > /dev/null; then
  SOCK=$T/owners.sock
  "$JAILD" serve --socket "$SOCK" --socket-group "$(id -g nobody)" --state-dir "$STATE" --pool 0 \
    --audit-log off --max-sessions-per-caller 1 > "$T/owners.log" 2>&1 &
  OWN_PID=$!
  BG_PIDS+=("$OWN_PID")
  for _ in $(seq 100); do curl -s -o /dev/null --unix-socket "$SOCK" http://jaild/healthz && break; sleep 0.1; done
  # own_as UID METHOD PATH [BODY]: the status; the answer is in $T/own.out.
  own_as() {
    local uid=$1 method=$2 path=$3 body=${4:-}
    # Made afresh for each answer, writable by the uid's curl.
    rm -f "$T/own.out"
    install -m 0666 /dev/null "$T/own.out"
    setpriv --reuid="$uid" --regid="$(id -g "$uid")" --clear-groups \
      curl -s --max-time 30 --unix-socket "$SOCK" -o "$T/own.out" -w '%{http_code}' -X "$method" \
      ${body:+-H 'Content-Type: application/json' --data-binary "$body"} "http://jaild$path" 2> /dev/null || true
  }
  NOBODY=$(id -u nobody)
  code=$(own_as 0 POST /sessions '{}')
  ROOT_SESS=$(jget "$T/own.out" id)
  hcheck owners_root_session "status $code: $(one < "$T/own.out")" [ "$code" = 201 -a -n "$ROOT_SESS" ]
  if [ -n "$ROOT_SESS" ]; then
    code=$(own_as "$NOBODY" GET /sessions)
    unseen() { [ "$code" = 200 ] && ! grep -q "$ROOT_SESS" "$T/own.out"; }
    hcheck owners_list_other_uid "status $code: $(one < "$T/own.out")" unseen
    for req in "get:GET /sessions/$ROOT_SESS" "jobs:GET /sessions/$ROOT_SESS/jobs"; do
      code=$(own_as "$NOBODY" ${req#*:})
      hcheck "owners_other_uid_${req%%:*}" "status $code: $(one < "$T/own.out")" [ "$code" = 404 ]
    done
    code=$(own_as "$NOBODY" POST /run "{\"command\":\"echo $SECRET-owner\",\"session_id\":\"$ROOT_SESS\"}")
    hcheck owners_other_uid_run_in "status $code: $(one < "$T/own.out")" [ "$code" = 404 ]
    # root holds its one session (--max-sessions-per-caller 1): nobody's
    # first is within its own quota.
    code=$(own_as "$NOBODY" POST /sessions '{}')
    NOBODY_SESS=$(jget "$T/own.out" id)
    hcheck owners_quota_per_uid "status $code: $(one < "$T/own.out")" [ "$code" = 201 ]
    code=$(own_as "$NOBODY" DELETE "/sessions/$ROOT_SESS")
    hcheck owners_other_uid_delete "status $code: $(one < "$T/own.out")" [ "$code" = 404 ]
    code=$(own_as 0 GET "/sessions/$ROOT_SESS")
    hcheck owners_session_survives "status $code: $(one < "$T/own.out")" [ "$code" = 200 ]
    own_as 0 DELETE "/sessions/$ROOT_SESS" > /dev/null
    [ -z "$NOBODY_SESS" ] || own_as "$NOBODY" DELETE "/sessions/$NOBODY_SESS" > /dev/null
  fi
  kill -TERM "$OWN_PID" 2> /dev/null || true
  wait "$OWN_PID" 2> /dev/null || true

  # MCP sessions, over TCP with two tokens.
  ALICE=alice-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  BOB=bob-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  printf 'alice:%s\nbob:%s\n' "$ALICE" "$BOB" > "$T/tokens"
  chmod 0600 "$T/tokens"
  serve owners-mcp.log --token-file "$T/tokens" --pool 0
  OWN_PID=$SERVE_PID
  # mcp TOKEN METHOD [SESSION] [BODY]: the status; the answer is in
  # $T/mcp.out, its headers in $T/mcp.hdr.
  mcp() {
    curl -s --max-time 60 -o "$T/mcp.out" -D "$T/mcp.hdr" -w '%{http_code}' -X "$2" "http://127.0.0.1:$PORT/mcp" \
      -H "Authorization: Bearer $1" -H 'Accept: application/json, text/event-stream' \
      ${3:+-H "Mcp-Session-Id: $3" -H 'Mcp-Protocol-Version: 2025-11-25'} \
      ${4:+-H 'Content-Type: application/json' --data-binary "$4"} 2> /dev/null || true
  }
  mcp "$ALICE" POST "" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sectest","version":"1"}}}' > /dev/null
  MCP_SESS=$(tr -d '\r' < "$T/mcp.hdr" | awk -F': ' 'tolower($1) == "mcp-session-id" {print $2}')
  mcp "$ALICE" POST "$MCP_SESS" '{"jsonrpc":"2.0","method":"notifications/initialized"}' > /dev/null
  CALL='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo '$SECRET'-mcp > /work/f; cat /work/f"}}}'
  code=$(mcp "$ALICE" POST "$MCP_SESS" "$CALL")
  wrote() { [ "$code" = 200 ] && grep -q "$SECRET-mcp" "$T/mcp.out"; }
  hcheck owners_mcp_session "session '$MCP_SESS', status $code: $(one < "$T/mcp.out")" wrote
  if [ -n "$MCP_SESS" ]; then
    code=$(mcp "$BOB" DELETE "$MCP_SESS")
    hcheck owners_mcp_delete_other_token "status $code: $(one < "$T/mcp.out")" [ "$code" = 404 ]
    code=$(mcp "$ALICE" POST "$MCP_SESS" '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"cat /work/f"}}}')
    hcheck owners_mcp_workspace_survives "status $code: $(one < "$T/mcp.out")" wrote
    mcp "$ALICE" DELETE "$MCP_SESS" > /dev/null
  fi
  kill -TERM "$OWN_PID" 2> /dev/null || true
  wait "$OWN_PID" 2> /dev/null || true
else
  skip owners "curl or setpriv is not installed"
fi

# --- trust: a daemon under attack ------------------------------------------
# Slow request bodies from many connections of a few peers must not lock a
# fresh peer out (a minimum body rate, and a full server makes room); and
# when the sandbox worker dies, requests still waiting in the queue wait for
# the new worker instead of failing.
if command -v curl > /dev/null && [ -x /usr/bin/python3 ]; then
  serve stress.log --pool 0 --max-concurrent 1 --queue-wait 60s --max-conns 64
  # 64 connections (16 from each of four loopback addresses) trickle a
  # body a byte every half second; then a fifth address asks /healthz.
  python3 - "$PORT" > "$T/trickle.out" 2>&1 << 'PY' &
import socket, sys, time
port = int(sys.argv[1])
socks = []
for host in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
    for _ in range(16):
        s = socket.socket()
        s.bind((host, 0))
        s.settimeout(1)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            socks.append(s)
        except OSError:
            s.close()
end = time.time() + 20
cut = 0
while time.time() < end and socks:
    for s in list(socks):
        try:
            s.sendall(b" ")
        except OSError:
            socks.remove(s); cut += 1
    time.sleep(0.5)
print("cut", cut, "left", len(socks))
PY
  TRICKLE=$!
  BG_PIDS+=("$TRICKLE")
  sleep 3
  start=$(date +%s%N)
  code=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.9 --max-time 15 "http://127.0.0.1:$PORT/healthz" || true)
  ms=$((($(date +%s%N) - start) / 1000000))
  hcheck stress_fresh_peer_served "healthz from a fresh peer: status $code after ${ms} ms" [ "$code" = 200 ]
  wait "$TRICKLE" 2> /dev/null || true
  # Tricklers are cut with a reason well before the 20 s they would take.
  trickled() { grep -q '^cut \([1-9][0-9]*\) left 0$' "$T/trickle.out"; }
  hcheck stress_slow_bodies_cut "$(one < "$T/trickle.out")" trickled

  # One slot: a long run holds it, a second waits in the queue; the
  # worker (the daemon's child) is killed. The held run fails; the queued
  # one runs on the new worker. HOLD marks the held command's process.
  HOLD=30.$$
  api() { curl -s -o "$T/$1.out" -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/run" -H 'Content-Type: application/json' -d "$2" 2> /dev/null || true; }
  api held "{\"command\":\"sleep $HOLD\",\"timeout_seconds\":60}" > "$T/held.code" &
  HELD=$!
  for _ in $(seq 100); do pgrep -P "$SERVE_PID" > /dev/null && [ -n "$(pgrep -x -f "sleep $HOLD" || true)" ] && break; sleep 0.1; done
  api queued '{"command":"echo after the restart"}' > "$T/queued.code" &
  QUEUED=$!
  sleep 1
  worker=
  for p in $(pgrep -P "$SERVE_PID"); do
    grep -q 'worker' "/proc/$p/cmdline" 2> /dev/null && worker=$p
  done
  if [ -n "$worker" ]; then kill -KILL "$worker"; fi
  wait "$HELD" "$QUEUED" 2> /dev/null || true
  queued_ran() { [ "$(cat "$T/queued.code")" = 200 ] && grep -q 'after the restart' "$T/queued.out"; }
  hcheck stress_queued_run_survives_worker_death "worker ${worker:-not found}; queued: $(cat "$T/queued.code") $(one < "$T/queued.out"); held: $(cat "$T/held.code")" queued_ran
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true
else
  skip stress "curl or python3 is not installed"
fi

# --- gaps: capacity refusals and the policy's view ------------------------------
# With the sandboxes' pids budget (--total-pids) used up by running
# sandboxes, a run that needs a new one is refused as the host being at
# capacity: 503 capacity with Retry-After, never a 500; once they end, runs
# work again (their teardown may take a while on a loaded host). Without --rootfs the policy resolves commands in the sandbox's own
# view: a program only the host has (in /var/tmp) is not found, and a name
# looked up through a host-only PATH entry is the sandbox's own file.
if command -v curl > /dev/null && command -v python3 > /dev/null; then
  GAPMARK=45.$$
  serve gaps-pids.log --pool 0 --total-pids 24 --max-concurrent 48
  gaps_api() { # NAME BODY: the status, the headers and body in $T/NAME.{hdr,out}
    curl -s -D "$T/$1.hdr" -o "$T/$1.out" -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/run" \
      -H 'Content-Type: application/json' -d "$2" 2> /dev/null || true
  }
  busy503() { # NAME CODE: 503, code capacity, a Retry-After of at least 1
    [ "$2" = 503 ] && grep -q '"code":"capacity"' "$T/$1.out" &&
      [ "$(sed -n 's/^Retry-After: *\([0-9]*\).*/\1/Ip' "$T/$1.hdr" | tr -d '\r')" -ge 1 ] 2> /dev/null
  }
  # How many fit depends on what a start takes on top of the sleep's one
  # pid; at most 24 fit, and the daemon admits 48 at once.
  holders=() refused=
  for i in $(seq 40); do
    gaps_api "gaps-hold$i" "{\"executable\":\"sleep\",\"args\":[\"$GAPMARK\"],\"timeout_seconds\":120}" > "$T/gaps-hold$i.code" &
    holders+=($!)
    BG_PIDS+=($!)
    for _ in $(seq 200); do
      [ "$(pgrep -cxf "sleep $GAPMARK" || true)" -ge "$i" ] && break
      kill -0 "${holders[-1]}" 2> /dev/null || { refused=$i; break; }
      sleep 0.05
    done
    [ -n "$refused" ] && break
  done
  if [ -n "$refused" ] && [ "$refused" -gt 1 ]; then
    wait "${holders[-1]}" 2> /dev/null || true
    code=$(cat "$T/gaps-hold$refused.code")
    hcheck gaps_pids_budget_start_503 "status $code: $(one < "$T/gaps-hold$refused.out")" busy503 "gaps-hold$refused" "$code"
    # The refused start may have met the pids of another start in flight:
    # while a run still finds room, another holder takes some.
    for extra in $(seq 10); do
      code=$(gaps_api gaps-full '{"command":"echo full"}')
      [ "$code" = 200 ] || break
      i=$((i + 1))
      gaps_api "gaps-hold$i" "{\"executable\":\"sleep\",\"args\":[\"$GAPMARK\"],\"timeout_seconds\":120}" > "$T/gaps-hold$i.code" &
      holders+=($!)
      BG_PIDS+=($!)
      for _ in $(seq 200); do
        [ "$(pgrep -cxf "sleep $GAPMARK" || true)" -ge "$((i - 1))" ] && break
        kill -0 "${holders[-1]}" 2> /dev/null || break
        sleep 0.05
      done
    done
    hcheck gaps_pids_budget_run_503 "status $code: $(one < "$T/gaps-full.out") $(one < "$T/gaps-full.hdr")" busy503 gaps-full "$code"
  else
    fail gaps_pids_budget_start_503 "no start refused after $i holders (refused at ${refused:-none}): $(one < "$T/gaps-pids.log")"
  fi
  for p in "${holders[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${holders[@]}"; do wait "$p" 2> /dev/null || true; done
  for _ in $(seq 100); do [ -z "$(pgrep -xf "sleep $GAPMARK" || true)" ] && break; sleep 0.1; done
  code=
  for _ in $(seq 300); do
    code=$(gaps_api gaps-free '{"command":"echo free"}')
    [ "$code" = 200 ] && break
    sleep 0.1
  done
  freed() { [ "$code" = 200 ] && grep -q '"stdout":"free\\n"' "$T/gaps-free.out"; }
  hcheck gaps_pids_budget_runs_again "status $code: $(one < "$T/gaps-free.out")" freed
  kill -TERM "$SERVE_PID" 2> /dev/null || true
  wait "$SERVE_PID" 2> /dev/null || true

  if [ -f "$T/policy/main.rego" ]; then
    UNSEEN=$(mktemp -d /var/tmp/jaild-sectest-unseen.XXXXXX)
    chmod 0755 "$UNSEEN"
    cp /usr/bin/id "$UNSEEN/ls"
    chmod 0755 "$UNSEEN/ls"
    serve gaps-policy.log --pool 0 --policy-dir "$T/policy" --decision-log "$T/gaps-decisions.log"
    code=$(gaps_api gaps-unseen "{\"executable\":\"$UNSEEN/ls\"}")
    notfound() { [ "$code" = 403 ] && grep -q 'resolve' "$T/gaps-unseen.out"; }
    hcheck gaps_policy_host_only_file_not_found "status $code: $(one < "$T/gaps-unseen.out")" notfound
    code=$(gaps_api gaps-path "{\"executable\":\"ls\",\"args\":[\"/\"],\"env\":{\"PATH\":\"$UNSEEN:/usr/bin:/bin\"}}")
    sandbox_ls() { [ "$code" = 200 ] && ! grep -q 'uid=' "$T/gaps-path.out" && ! grep -q "\"path\":\"$UNSEEN" "$T/gaps-decisions.log"; }
    hcheck gaps_policy_decides_what_the_sandbox_sees "status $code: $(one < "$T/gaps-path.out"); log: $(grep -o '"path":"[^"]*"' "$T/gaps-decisions.log" | one)" sandbox_ls
    kill -TERM "$SERVE_PID" 2> /dev/null || true
    wait "$SERVE_PID" 2> /dev/null || true
    rm -rf "$UNSEEN"
  else
    skip gaps_policy_view "the policy input block made no policy"
  fi
else
  skip gaps "curl or python3 is not installed"
fi

# --- nothing left behind -----------------------------------------------------
# Processes of this binary that were not there at the start.
sleep 0.2
jaild_pids | sort > "$T/pids.after"
left=$(comm -13 "$T/pids.before" "$T/pids.after" | while read -r p; do
  printf '%s ' "$p:$(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | cut -c1-60)"
done)
# Sandboxed processes carry our markers in their arguments.
left+=$(pgrep -afx "sleep ($mark|$bgmark)" | one || true)
hcheck no_leftover_processes "$left" [ -z "$left" ]

# Cgroups: new since the snapshot. A concurrent jaild's live sandbox always
# holds a process; ours are leftovers whatever they hold; an empty new one is
# re-checked after a grace period (it may be a concurrent run's, mid-teardown).
leftover_cgroups() {
  local d procs id ours
  jaild_cgroups | comm -13 "$T/cgroups.before" - | while read -r d; do
    [ -d "$d" ] || continue
    ours=
    for id in "${IDS[@]}"; do [[ $d == *"$id"* ]] && ours=1 && break; done
    procs=$(find "$d" -name cgroup.procs -exec cat {} + 2> /dev/null | head -1)
    if [ -n "$ours" ] || [ -z "$procs" ]; then echo "$d"; fi
  done
}
lc=$(leftover_cgroups)
if [ -n "$lc" ]; then sleep 2; lc=$(leftover_cgroups); fi
hcheck no_leftover_cgroups "$(one 300 <<< "$lc")" [ -z "$lc" ]

# State: every sandbox's libcontainer state dir gone (the rootfs template
# and the cgroup lock are meant to stay); no host uid slot naming our state.
ls_state=$(ls -A "$STATE/containers" 2> /dev/null || true)
ls_state+=$(find "$STATE" -maxdepth 1 -name ".rootfs-*")
slots=$(grep -l "$STATE" /run/jaild/slots/* 2> /dev/null || true)
if [ -z "$ls_state" ] && [ -z "$slots" ]; then pass no_leftover_state_dirs
else fail no_leftover_state_dirs "containers: '$(one <<< "$ls_state")' slots: '$(one <<< "$slots")'"; fi
mnt=$(grep -F "$T" /proc/self/mountinfo || true)
hcheck no_leftover_mounts "mounts under $T: $(one <<< "$mnt")" [ -z "$mnt" ]

if [ "${#SKIPPED[@]}" -gt 0 ]; then
  echo "(${#SKIPPED[@]} probes skipped: ${SKIPPED[*]})"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
