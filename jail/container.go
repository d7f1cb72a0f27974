package jail

import (
	"fmt"
	"strings"

	"github.com/jaild/jaild/cgroup"
	"golang.org/x/sys/unix"
)

// initPIDNS is the inode of the host's (initial) pid namespace, a constant
// of the kernel (PROC_PID_INIT_INO).
const initPIDNS = 0xEFFFFFFC

// containerSignals lists what says that jaild runs in a container, empty
// on a host. The rule: a pid or cgroup namespace other than the host's
// (the kernel numbers the initial ones with fixed inodes). Every engine
// gives a container one of them unless told to share the host's (hostPID
// without a private cgroup namespace): jaild then sees the host's
// processes and cgroups as a host process would. Marker files
// (/.dockerenv, /run/.containerenv) and the `container` variable are not
// part of the rule: a VM image built from a container keeps them.
func containerSignals() []string {
	var s []string
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) == nil && st.Ino != initPIDNS {
		s = append(s, "pid namespace")
	}
	if cgroup.PrivateNamespace() {
		s = append(s, "cgroup namespace")
	}
	return s
}

// checkContainer says whether jaild runs in a container and what that
// changes for it.
func checkContainer(mode cgroup.Mode) Finding {
	sig := containerSignals()
	f := Finding{Name: "container", OK: true}
	if len(sig) == 0 {
		f.Detail = "no: on the host"
		return f
	}
	var what []string
	what = append(what, "cgroup paths resolve through each mount's root in /proc/self/mountinfo")
	if !writableCgroupfs(mode) {
		f.OK = false
		what = append(what, cgroup.Root+" is read-only: mount it read-write (a privileged container with the cgroupfs bound rw)")
	}
	if mode == cgroup.V2 {
		what = append(what, "placement on v2: see cgroup delegation")
	}
	what = append(what, "sandbox rlimits capped by the container's (see rlimits)",
		"uid slots are host-wide: keep --state-dir on the host (hostPath), shared by every jaild of the host")
	f.Detail = fmt.Sprintf("yes (%s): %s", strings.Join(sig, ", "), strings.Join(what, "; "))
	return f
}

// writableCgroupfs reports whether jaild can create cgroups: on v2 in the
// mount at cgroup.Root, on v1 in the memory hierarchy.
func writableCgroupfs(mode cgroup.Mode) bool {
	dir := cgroup.Root
	if mode != cgroup.V2 {
		dir += "/memory"
	}
	return unix.Access(dir, unix.W_OK) == nil
}
