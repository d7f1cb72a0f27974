// Package jail runs one command in a fresh, locked-down Linux sandbox built
// with libcontainer, and reports what happened.
//
// A [Manager] builds sandboxes; [Manager.Run] is the whole life of one:
//
//	m, err := jail.New(jail.Config{})
//	res, err := m.Run(ctx, &jail.Spec{Command: box.Command{Args: []string{"echo", "hi"}}})
//
// Each sandbox has its own user, pid, mount, network (loopback only), IPC,
// UTS and cgroup namespaces. Container root maps to a host uid range of its
// own (a "slot", never host root, never shared by two live sandboxes) and
// the command runs as uid 1000 inside, with no capabilities, no_new_privs, a
// seccomp filter that denies what a sandbox never needs (see seccomp.go) and
// runc's masked and read-only /proc paths. The root is read-only (package
// rootfs); the working directory (/work, or Config.WorkDir: the default
// cwd and HOME) and /tmp are size-capped tmpfs mounts that vanish with the
// sandbox. /dev holds the usual six device nodes; where the kernel allows
// it, it is one read-only tmpfs that jaild fills once and every sandbox
// binds (see devdir.go). A Manager alone in a mount namespace of its own
// (the daemon's worker: Config.PrivateMounts) binds the root's read-only
// host paths into the template once, for every sandbox, and mounts each
// sandbox's /tmp and working directory on a root of the sandbox's own (see
// privatemounts.go, sandboxroot.go). Memory (no swap), pids and CPU limits are set on the sandbox's
// cgroup before the command starts, under a parent cgroup with an aggregate
// budget (package cgroup). The environment is fixed plus what the caller
// passes; nothing of jaild's own environment leaks in.
//
// # Verdict
//
// [box.Result] carries the exit status, the output (capped while it is read:
// head and tail kept with an [box.Elide] marker between, the rest drained so
// the command never blocks), and the verdict: timed out, cancelled,
// OOM-killed (from the cgroup's oom_kill counter: a shell can exit 0 after
// its child was OOM-killed), pids limit hit (pids.events), CPU time and
// peak memory.
//
// # Teardown
//
// On exit, timeout or cancellation every process of the sandbox is killed
// (killing the pid namespace's init kills the rest), jaild waits a bounded
// time, reads the counters and destroys the container, its cgroup and
// state: after the run has returned, in the background, for up to
// Config.TeardownBacklog sandboxes at once (see teardown.go). jaild holds
// the sandbox's namespaces open until then, so that the kernel ends them
// then too, not between the command's exit and the answer. Every sandbox
// whose init was started is waited for when it is destroyed, whether or not
// it ever ran a command (a pooled or prestarted one), so that none is left
// a zombie holding a pid of the budget. A sandbox outlives a jaild that is
// SIGKILLed, so each one records
// itself in a slot file under [SlotDir] and holds an flock on it while its
// owner lives. Each Manager's watchdog process (see watchdog.go) destroys
// the owner's sandboxes as soon as the owner dies; [New] and
// [Manager.Sweep] destroy the sandboxes whose slot lock is free of this
// installation (state dir), or of one that is gone (its state dir removed),
// and only those, so a sweep never touches a sandbox of a jaild that is
// still running. Another live installation's orphan is destroyed by a new
// sandbox only when it needs that slot, no clean one being left. Slots are
// taken in turn round the host's range (see nextSlotFile), and a sweep
// opens only the slot files that no flock it can see holds (see slotScan),
// so a jaild beside another's thousands of sessions does not walk theirs.
//
// # Pools
//
// A sandbox's limits, uid range and configuration are fixed before anything
// starts, and its command is handed to it only then. A [Pool] uses that:
// it keeps sandboxes started (their init jaild's minimal "pool-wait",
// blocked reading its command from a pipe, which it then execs), so that a
// run does not wait for a sandbox to be built; see its doc for what it can
// and cannot serve. A waiting init loads the seccomp filter itself, one
// program compiled once per Manager by libcontainer's own code (see
// seccompprobe.go), so a run that finds none ready gets one built for it
// too. The replacement of a sandbox a run took is built once
// that run ends (or 50 ms into it), not beside the command it replaces.
//
// # Workspaces
//
// A [Workspace] is what the sandboxes of one session share: a working
// directory that outlives them (a size-capped tmpfs jaild holds, detached
// where the kernel allows, and binds into each), a network namespace with
// only loopback that they all join, and the uid range they all map, so
// that files one writes are the next one's. Neither is mounted in jaild's
// mount namespace, which every new sandbox's starts as a copy of: however
// many sessions live, a sandbox's start costs the same. Every other namespace, limit and filter stays each sandbox's own.
// The workspace's slot record lists its live sandboxes, so a sweep after a
// crash removes them, and a tmpfs mounted on the host. A workspace made
// [WithPrestart] keeps one sandbox started for its next run, waiting in the
// pool's init, and up to four while its runs come back to back or at once,
// and none once it has run nothing for [Config.PrestartIdle] (dormant: no
// process, no cgroup and, once none of its sandboxes is left, no network
// namespace; its next run builds a sandbox, with a fresh namespace, and
// wakes it; see workspacewarm.go). Calls at once hold their replacements'
// builds back until the last of them ends, or 50 ms; the builds no run
// waits for are made at most [Config.PrestartBuilds] at once (see
// prestartgate.go). Package session
// builds sessions on it; docs/sessions.md explains the choices.
//
// # Egress
//
// A [Spec] with [Egress] gets a network namespace that jaild makes itself,
// still loopback only, with a TCP listener on 127.0.0.1:[ProxyPort] in it
// that the caller serves from outside (package egress is jaild's proxy),
// and the proxy variables in its environment. Its root cannot add a route
// or an interface: the namespace belongs to the host's user namespace. The
// namespace is pinned under the state dir and named in the sandbox's slot
// record, so that teardown, the watchdog and the sweep remove it.
//
// # Binaries
//
// libcontainer re-executes the calling binary as "<binary> init" for every
// container: a program using this package must call libcontainer.Init from
// an init function when os.Args[1] is "init", before anything else (see
// internal/inithook), and lock its main goroutine to the main thread. Each
// Manager re-executes it as "<binary> watchdog" and "<binary>
// seccomp-probe" too: the program must call [MaybeWatchdog] as early
// (internal/inithook does both); importing this
// package alone changes nothing in a process.
// Building needs cgo and, for seccomp, the seccomp build tag and
// libseccomp-dev; without the tag every sandbox start fails rather than run
// unfiltered.
package jail
