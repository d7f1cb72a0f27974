#!/usr/bin/env bash
# container-test.sh: runs jaild inside privileged containers (containerd, ctr)
# and checks that its verdicts are the host's and that it leaves nothing.
#
#   scripts/container-test.sh                      # the image's jaild
#   JAILD_BIN=bin/jaild scripts/container-test.sh  # another jaild, bound over it
#
# Needs root, containerd and ctr (Debian: apt-get install containerd), jq, and
# dist/jaild-image.tar: without it the test skips, naming the command that
# builds it (scripts/build-image.sh), unless BUILD_IMAGE=1 builds it first.
#
# It starts a containerd of its own (root, state and socket in a temp dir,
# CRI off), imports the image, and runs one container per layout of the
# cgroup file system a privileged container can get:
#   runtime   runc mounts cgroupfs: without a cgroup namespace the mount
#             shows the container's own cgroup (mountinfo root /<ctr>)
#   hostfs    the host's /sys/fs/cgroup bound rw (mountinfo root /)
#   cgroupns  a private cgroup namespace with cgroupfs mounted from it (what
#             Docker and Kubernetes give on v2); on v2 jaild makes the leaf
#             move there
# each privileged, with a tmpfs /run, no network, and the runtime's default
# NOFILE of 1024. In each, jaild doctor must pass and say "container yes"
# and that NOFILE is clamped, and `jaild run --json` must give the host's
# verdicts: an OOM kill (tail /dev/zero, --memory 64M) with cpu_ms and
# memory_peak_bytes > 0, a refused fork (--pids 32), a timeout. While a
# sandbox runs, the host reads /proc/PID/cgroup of its process and checks
# that the cgroup's parent carries the --total-memory budget. After the
# container: no cgroup left under the containers' cgroup, no sandbox
# process, no mount under the temp dir; then containerd's state is removed.
#
# VARIANTS (default "runtime hostfs cgroupns") picks layouts; PROBE_SECONDS
# (default 4) is how long the probed sandbox lives (more on a slow VM).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

[ "$(id -u)" -eq 0 ] || { echo "container-test.sh: run as root" >&2; exit 1; }
for c in containerd ctr jq unshare; do
	command -v "$c" > /dev/null || { echo "container-test.sh: SKIP: $c not installed (apt-get install containerd jq)"; exit 0; }
done
IMAGE_TAR=${IMAGE_TAR:-dist/jaild-image.tar}
if [ ! -f "$IMAGE_TAR" ]; then
	if [ "${BUILD_IMAGE:-0}" = 1 ]; then
		scripts/build-image.sh
	else
		echo "container-test.sh: SKIP: no $IMAGE_TAR; build it with: scripts/build-image.sh (or run with BUILD_IMAGE=1)"
		exit 0
	fi
fi
VARIANTS=${VARIANTS:-runtime hostfs cgroupns}
if [ -n "${JAILD_BIN:-}" ]; then
	JAILD_BIN=$(realpath "$JAILD_BIN")
fi
v2=0
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && v2=1

id=$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
T=$(mktemp -d "/tmp/jaild-ctest-$id.XXXX")
NS=jaild-ctest-$id
# The containers' cgroups are $CG/<variant>. On v2, at the root (a
# container's cgroup needs a parent without processes). On v1, relative:
# runc makes them under its own cgroup in each hierarchy, which is this
# shell's (containerd and its shims are its children), so that a shell
# in a nested cgroup (a memory cgroup of its host's machinery, say) keeps
# its containers inside it, where the root would move them out.
if [ $v2 = 1 ]; then CG=/jaild-ctest-$id; else CG=jaild-ctest-$id; fi
SOCK=$T/ctrd.sock
ctrd_pid=
fail=0

ctr_() { ctr --address "$SOCK" --namespace "$NS" "$@"; }

# cgroup_dirs lists the host's directories of cgroup $1 in every
# hierarchy: on v1 below this shell's own cgroup in each.
cgroup_dirs() {
	if [ $v2 = 1 ]; then
		echo "/sys/fs/cgroup$1"
		return
	fi
	local ctrls own dir
	while IFS=: read -r _ ctrls own; do
		case $ctrls in
		"") dir=unified ;;
		name=*) dir=${ctrls#name=} ;;
		*) dir=$ctrls ;;
		esac
		[ -d "/sys/fs/cgroup/$dir" ] && echo "/sys/fs/cgroup/$dir${own%/}/$1"
	done < /proc/self/cgroup
}

cleanup() {
	set +e
	if [ -S "$SOCK" ]; then
		for c in $(ctr_ tasks ls -q 2> /dev/null); do ctr_ tasks kill -s SIGKILL "$c" > /dev/null 2>&1; done
		sleep 0.5
		for c in $(ctr_ containers ls -q 2> /dev/null); do
			ctr_ tasks delete -f "$c" > /dev/null 2>&1
			ctr_ containers delete "$c" > /dev/null 2>&1
		done
		for i in $(ctr_ images ls -q 2> /dev/null); do ctr_ images rm "$i" > /dev/null 2>&1; done
		ctr --address "$SOCK" namespaces rm "$NS" > /dev/null 2>&1
	fi
	if [ -n "$ctrd_pid" ]; then
		kill "$ctrd_pid" 2> /dev/null
		wait "$ctrd_pid" 2> /dev/null
	fi
	# Mounts under the temp dir (snapshots, shim state), deepest first.
	grep -o " $T[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
	for d in $(cgroup_dirs "$CG"); do
		[ -d "$d" ] || continue
		find "$d" -depth -type d -exec rmdir {} + 2> /dev/null
	done
	rm -rf "$T"
	echo "container-test.sh: $(( $(date +%s) - start ))s"
}
trap cleanup EXIT

bad() { echo "FAIL [$variant] $*"; fail=1; }

# containerd of our own: nothing of it outside $T but the shims' sockets,
# which they remove when they exit.
cat > "$T/config.toml" << EOF
version = 2
root = "$T/root"
state = "$T/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$T/debug.sock"
EOF
containerd --config "$T/config.toml" > "$T/containerd.log" 2>&1 &
ctrd_pid=$!
for _ in $(seq 100); do
	ctr --address "$SOCK" version > /dev/null 2>&1 && break
	sleep 0.1
done
ctr_ images import --all-platforms "$IMAGE_TAR" > /dev/null
ref=$(ctr_ images ls -q | head -1)
echo "container-test.sh: image $ref, cgroup v$((v2 + 1))${JAILD_BIN:+, jaild $JAILD_BIN}"

# inner.sh runs in each container. With CGROUPNS=1 it first enters a new
# cgroup and mount namespace and mounts cgroupfs from it.
cat > "$T/inner.sh" << 'EOF'
#!/bin/sh
set -u
out=/ctest/out
if [ "$CGROUPNS" = 1 ] && [ -z "${IN_NS:-}" ]; then
	exec env IN_NS=1 unshare --cgroup --mount --propagation private sh /ctest/inner.sh
fi
if [ "$CGROUPNS" = 1 ]; then
	umount -R /sys/fs/cgroup 2> /dev/null
	if [ "$V2" = 1 ]; then
		mount -t cgroup2 cgroup2 /sys/fs/cgroup
	else
		mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
		while IFS=: read -r _ ctrls _; do
			case "$ctrls" in
			"") dir=unified; mkdir -p /sys/fs/cgroup/$dir; mount -t cgroup2 cgroup2 /sys/fs/cgroup/$dir ;;
			name=*) dir=${ctrls#name=}; mkdir -p /sys/fs/cgroup/$dir; mount -t cgroup -o none,$ctrls cgroup /sys/fs/cgroup/$dir ;;
			*) dir=$ctrls; mkdir -p /sys/fs/cgroup/$dir; mount -t cgroup -o $ctrls cgroup /sys/fs/cgroup/$dir ;;
			esac
		done < /proc/self/cgroup
	fi
fi
cat /proc/self/cgroup > $out/cgroup.txt
grep cgroup /proc/self/mountinfo > $out/mountinfo.txt
jaild doctor > $out/doctor.txt 2>&1
echo $? > $out/doctor.rc
run() { name=$1; shift; jaild run --json --total-memory 300M "$@" > $out/$name.json 2> $out/$name.err; }
run oom --memory 64M -- tail /dev/zero
run pids --pids 32 --shell 'for i in $(seq 64); do sleep 5 & done; wait'
run timeout --timeout 1s --shell 'while :; do :; done'
# A sandbox the host looks at while it runs (see probe below).
run probe --timeout 10m -- sleep "$PROBE"
cat /proc/self/cgroup > $out/cgroup-after.txt
EOF

# probe finds the sandbox process `sleep $1` from the host, and checks that
# the parent of its cgroup (as the host's /proc/PID/cgroup names it) carries
# the 300M budget.
probe() {
	local pid= p f want=314572800
	while [ -z "$pid" ] && kill -0 "$ctr_run" 2> /dev/null; do
		# One grep over every cmdline: its NUL-separated arguments are
		# lines to grep -z, and $1 is unique to this run.
		for p in $(grep -lszFx -- "$1" /proc/[0-9]*/cmdline || true); do
			p=${p%/cmdline}
			if [ "$(tr '\0' ' ' 2> /dev/null < "$p/cmdline")" = "sleep $1 " ]; then pid=${p#/proc/}; fi
		done
		[ -n "$pid" ] || sleep 0.1
	done
	[ -n "$pid" ] || { bad "probe: no sandbox process 'sleep $1' seen from the host"; return; }
	if [ $v2 = 1 ]; then
		p=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
		f=/sys/fs/cgroup$(dirname "$p")/memory.max
	else
		p=$(sed -n 's/^[0-9]*:memory://p' "/proc/$pid/cgroup")
		f=/sys/fs/cgroup/memory$(dirname "$p")/memory.limit_in_bytes
	fi
	echo "  sandbox $pid in $p; budget file $f"
	# On v2 a container's own tree is delegated: the leaf move, sandboxes
	# in /sandboxes of the container's cgroup.
	if [ $v2 = 1 ] && [ $variant = cgroupns ] && [[ $p != "$CG/$variant/sandboxes/"* ]]; then
		bad "probe: sandbox in $p, want it in $CG/$variant/sandboxes (the leaf move)"
	fi
	[ "$(cat "$f" 2> /dev/null)" = $want ] || bad "probe: $f is '$(cat "$f" 2>&1)', want $want: the budget is not where the sandbox is"
}

for variant in $VARIANTS; do
	echo "== $variant"
	vstart=$(date +%s.%N)
	before=$(ls -d /sys/fs/cgroup/jaild 2> /dev/null || true)
	dir=$T/$variant
	mkdir -p "$dir/out"
	cp "$T/inner.sh" "$dir/"
	opts=(--privileged --cgroup "$CG/$variant" --runc-root "$T/runc"
		--mount "type=tmpfs,src=tmpfs,dst=/run,options=rw:nosuid:nodev:mode=755"
		--mount "type=bind,src=$dir,dst=/ctest,options=rbind:rw")
	case $variant in
	runtime | cgroupns) opts+=(--mount "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=rw:nosuid:nodev:noexec") ;;
	hostfs) opts+=(--mount "type=bind,src=/sys/fs/cgroup,dst=/sys/fs/cgroup,options=rbind:rw") ;;
	*) echo "unknown variant $variant" >&2; exit 2 ;;
	esac
	[ -n "${JAILD_BIN:-}" ] && opts+=(--mount "type=bind,src=$JAILD_BIN,dst=/usr/local/bin/jaild,options=rbind:ro")
	probe_arg=${PROBE_SECONDS:-4}.$(date +%N) # the host has that long to find it
	ctr_ run --rm "${opts[@]}" --env "CGROUPNS=$([ $variant = cgroupns ] && echo 1 || echo 0)" --env "V2=$v2" \
		--env "PROBE=$probe_arg" "$ref" "ctest-$variant" /bin/sh /ctest/inner.sh > "$dir/ctr.log" 2>&1 &
	ctr_run=$!
	probe "$probe_arg"
	wait $ctr_run || bad "ctr run exited $?: $(cat "$dir/ctr.log")"
	o=$dir/out
	echo "  $(grep -E '^\S+ +(container|rlimits|cgroup delegation) ' "$o/doctor.txt" | tr -s ' ' | paste -sd'|' | sed 's/|/\n  /g')"
	[ "$(cat "$o/doctor.rc" 2> /dev/null)" = 0 ] || bad "doctor: $(cat "$o/doctor.txt")"
	grep -qE '^ok +container +yes' "$o/doctor.txt" || bad "doctor does not say it runs in a container"
	grep -q 'NOFILE clamped to 1024' "$o/doctor.txt" || bad "doctor does not say NOFILE is clamped to 1024"
	check() { # name, jq filter, what
		jq -e "$2" "$o/$1.json" > /dev/null 2>&1 || bad "$1: want $3, got $(jq -c '{exit_code,timed_out,oom_killed,pids_limit_hit,cpu_ms,memory_peak_bytes}' "$o/$1.json" 2> /dev/null || cat "$o/$1.json" "$o/$1.err")"
	}
	check oom '.oom_killed == true and .cpu_ms > 0 and .memory_peak_bytes > 0' "oom_killed, cpu_ms > 0, memory_peak_bytes > 0"
	check pids '.pids_limit_hit == true' "pids_limit_hit"
	check timeout '.timed_out == true and .cpu_ms > 0' "timed_out, cpu_ms > 0"
	check probe '.exit_code == 0' "exit 0"
	for f in oom pids timeout; do echo "  $f: $(jq -c '{timed_out,oom_killed,pids_limit_hit,cpu_ms,memory_peak_bytes}' "$o/$f.json" 2> /dev/null)"; done
	# Nothing of jaild on the host once the container is gone.
	for d in $(cgroup_dirs "$CG/$variant"); do
		[ ! -d "$d" ] || bad "cgroup $d left after the container ended: $(find "$d" -type d | head -5)"
	done
	if grep -qszFx -- "$probe_arg" /proc/[0-9]*/cmdline; then bad "a sandbox process outlived the container"; fi
	# The sandboxes' cgroups, wherever they were (on a hybrid host,
	# libcontainer makes them in the unified hierarchy's /jaild, which any
	# jaild of the host shares, so that parent cannot be checked here).
	for sid in $(jq -r '.id // empty' "$o"/*.json 2> /dev/null); do
		left=$(find /sys/fs/cgroup -maxdepth 7 -type d -name "$sid" 2> /dev/null || true)
		[ -z "$left" ] || bad "sandbox cgroup left: $left"
	done
	if [ $v2 = 1 ] && [ -d /sys/fs/cgroup/jaild ] && [ -z "$before" ]; then bad "/sys/fs/cgroup/jaild left on the host"; fi
	echo "  $variant: $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $vstart}")s"
done

# containerd's state goes with $T (cleanup); the containers must be gone.
[ -z "$(ctr_ containers ls -q)" ] || { variant=all; bad "containers left: $(ctr_ containers ls -q)"; }
if [ $fail = 0 ]; then echo "container-test.sh: PASS ($VARIANTS)"; else echo "container-test.sh: FAIL"; fi
exit $fail
