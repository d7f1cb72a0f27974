// Package cgroup owns jaild's cgroups: the parent cgroup that holds every
// sandbox and carries the aggregate budget (through
// github.com/containerd/cgroups/v3), the usage readings taken from a
// sandbox's cgroup after its command ends (the four files that hold them,
// read directly: they sit between the command's exit and the answer;
// [Counters] opens them beforehand, while the command runs, and reads each
// with one pread), and
// the removal of cgroups a crashed jaild left behind.
//
// libcontainer creates, limits and destroys each sandbox's own cgroup; this
// package only reads it, and removes it when its owner is gone. So every
// cgroup has one owner at a time.
//
// jaild's own cgroup in each hierarchy is found as libcontainer finds it:
// the path in /proc/self/cgroup, taken relative to the root that
// /proc/self/mountinfo gives for the hierarchy's mount (a container without
// a cgroup namespace may see its own cgroup mounted as the whole tree; see
// mount.go). Placement differs by mode:
//
//   - cgroup v1 (and hybrid): the parent is nested under jaild's own cgroup in
//     every hierarchy ("<own>/jaild"), so jaild never writes outside what it
//     was given; in a hybrid host's unified hierarchy, which has no
//     controllers, it is "/jaild", where libcontainer puts it.
//   - cgroup v2: if jaild runs in a delegated cgroup (systemd Delegate=yes,
//     which marks it with the trusted.delegate xattr) it moves itself into the
//     leaf "<own>/daemon" and puts sandboxes under "<own>/sandboxes": the
//     no-internal-processes rule forbids enabling controllers for children of
//     a cgroup that holds processes. A container's own tree (jaild at the root
//     of the mount, which is not the hierarchy's real root) counts as
//     delegated, and there jaild also moves the container's other processes,
//     into "/init". Otherwise the parent is "/jaild" at the root of the
//     mount. An explicit parent path overrides all of these. v2 paths are
//     below /sys/fs/cgroup, as the mount shows the hierarchy.
//
// [Parent.Warm] hides most of the kernel's wait on the first move of a
// process into a cgroup after a quiet spell (an RCU grace period), which
// every cold container start otherwise pays on its critical
// path: it starts that wait in the background by moving a thread of jaild
// into the parent, in a hierarchy that accounts for nothing (v1), or jaild
// within its own daemon leaf (v2).
//
// [Parent.Files] is the parent's child for the short-lived processes that
// write workspace files for a daemon: tmpfs pages are charged to the
// writer's memory cgroup, so that what the files API writes counts against
// the sandboxes' budget, not the daemon's. Every user of a parent (a
// daemon's front end and its worker, other jailds) holds a shared lock on
// it, and the last to close removes it.
package cgroup
