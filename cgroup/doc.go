// Package cgroup owns jaild's cgroups: the parent cgroup that holds every
// sandbox and carries the aggregate budget (through
// github.com/containerd/cgroups/v3), the usage readings taken from a
// sandbox's cgroup after its command ends (the four files that hold them,
// read directly: they sit between the command's exit and the answer), and
// the removal of cgroups a crashed jaild left behind.
//
// libcontainer creates, limits and destroys each sandbox's own cgroup; this
// package only reads it, and removes it when its owner is gone. So every
// cgroup has one owner at a time.
//
// Placement differs by mode:
//
//   - cgroup v1 (and hybrid): the parent is nested under jaild's own cgroup in
//     every hierarchy ("<own>/jaild"), so jaild never writes outside what it
//     was given.
//   - cgroup v2: if jaild runs in a delegated cgroup (systemd Delegate=yes,
//     which marks it with the trusted.delegate xattr) it moves itself into the
//     leaf "<own>/daemon" and puts sandboxes under "<own>/sandboxes": the
//     no-internal-processes rule forbids enabling controllers for children of
//     a cgroup that holds processes. Otherwise the parent is "/jaild" at the
//     root of the hierarchy. An explicit parent path overrides both.
//
// [Parent.Warm] hides most of the kernel's wait on the first move of a
// process into a cgroup after a quiet spell (an RCU grace period), which
// every cold container start otherwise pays on its critical
// path: it starts that wait in the background by moving a thread of jaild
// into the parent, in a hierarchy that accounts for nothing (v1), or jaild
// within its own daemon leaf (v2).
package cgroup
