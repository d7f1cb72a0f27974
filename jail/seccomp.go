package jail

import (
	"runtime"
	"slices"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp filter is an allowlist modeled on Docker's default
// profile (moby/profiles seccomp/default.json) as it applies to a container
// without capabilities: every syscall not named here fails with EPERM, so a
// syscall a future kernel adds is closed until someone decides to open it.
// Where jaild is stricter than Docker, the list says so and why.
//
// runc (libcontainer/seccomp/patchbpf) puts a stub in front of the filter
// that returns ENOSYS, not EPERM, for every syscall number above the highest
// one this list names that libseccomp knows: that is what a libc sees on a
// kernel too old for the syscall, so its fallbacks keep working (glibc's
// clone3 to clone, fchmodat2 and statx emulations, and so on). Below that
// number, a syscall left out gets EPERM, as a capability check would give.
//
// libseccomp compiles the filter in every fresh sandbox's init, just before
// the command is executed, and the init itself (Go runtime, runc) makes a
// few dozen ordinary syscalls after the filter is in place: everything it
// needs is in the list below. A waiting sandbox's init (pool-wait) loads
// the same program, compiled once per Manager (see seccompprobe.go), and
// then needs read, close, fcntl, chdir, stat, access and execve.

// allowedSyscalls may be called with any arguments. Names this libseccomp
// does not know are skipped by runc, so a list newer than the library is
// harmless; names one architecture lacks (open, fork on arm64) are skipped
// there.
var allowedSyscalls = []string{
	// Process life: creation is clone (below, with its flags checked),
	// fork/vfork, execve; waiting and exiting.
	"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4",
	"waitid", "restart_syscall", "set_tid_address", "set_robust_list",
	"get_robust_list", "rseq",
	// Signals to oneself and to processes of the same sandbox (the pid
	// namespace keeps every other process out of reach). pidfd_getfd is
	// left out: it copies another process's file descriptors, which Docker
	// grants only with CAP_SYS_PTRACE.
	"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
	"pidfd_open", "pidfd_send_signal", "rt_sigaction", "rt_sigprocmask",
	"rt_sigpending", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
	"sigaltstack", "signalfd", "signalfd4", "pause",
	// Identity and credentials. Without capabilities the set*id calls can
	// only move between the ids the process already has.
	"getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setsid",
	"setpgid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
	"getresgid", "getgroups", "setuid", "setgid", "setreuid", "setregid",
	"setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "capget",
	"capset",
	// Process attributes, limits (cgroups cap what matters), scheduling
	// within the sandbox's own CPU quota.
	"prctl", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times",
	"umask", "getpriority", "setpriority", "ioprio_get", "ioprio_set",
	"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr",
	"sched_setattr", "sched_getparam", "sched_setparam", "sched_getscheduler",
	"sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
	"sched_rr_get_interval", "getcpu", "uname", "sysinfo", "getrandom",
	// Further seccomp filters and Landlock rulesets can only narrow what
	// the process may do.
	"seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self",
	// Memory. mbind, set_mempolicy and friends are left out, as Docker
	// does without CAP_SYS_NICE.
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore",
	"msync", "mlock", "mlock2", "mlockall", "munlock", "munlockall",
	"remap_file_pages", "membarrier", "memfd_create", "memfd_secret",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack", "mseal",
	"process_mrelease",
	// Threads and time. Reading clocks only: setting or adjusting them
	// (settimeofday, clock_settime, clock_adjtime, adjtimex) is host-wide
	// state, left out even in the read-only form Docker allows.
	"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
	"nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
	"gettimeofday", "time", "alarm", "getitimer", "setitimer",
	"timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	// File descriptors and I/O.
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
	"preadv2", "pwritev", "pwritev2", "lseek", "close", "close_range", "dup",
	"dup2", "dup3", "fcntl", "ioctl", "flock", "pipe", "pipe2", "splice",
	"tee", "vmsplice", "sendfile", "copy_file_range", "eventfd", "eventfd2",
	"fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "readahead",
	"fadvise64", "fallocate", "ftruncate", "cachestat",
	// Waiting for events.
	"select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
	"epoll_ctl", "epoll_ctl_old", "epoll_wait", "epoll_wait_old",
	"epoll_pwait", "epoll_pwait2", "inotify_init", "inotify_init1",
	"inotify_add_watch", "inotify_rm_watch", "fanotify_mark",
	// Legacy asynchronous I/O (io_uring is left out: below).
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
	"io_pgetevents",
	// Paths. name_to_handle_at is left out with open_by_handle_at (below).
	"open", "openat", "openat2", "creat", "access", "faccessat",
	"faccessat2", "stat", "lstat", "fstat", "newfstatat", "statx", "statfs",
	"fstatfs", "getcwd", "chdir", "fchdir", "getdents", "getdents64",
	"readlink", "readlinkat", "mkdir", "mkdirat", "mknod", "mknodat",
	"rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
	"linkat", "symlink", "symlinkat", "truncate", "chmod", "fchmod",
	"fchmodat", "fchmodat2", "chown", "fchown", "fchownat", "lchown", "utime",
	"utimes", "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr",
	"getxattrat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
	"listxattr", "llistxattr", "flistxattr", "listxattrat", "removexattr",
	"lremovexattr", "fremovexattr", "removexattrat",
	// Sockets, once made (socket and socketpair are below, with their
	// address family checked).
	"bind", "connect", "listen", "accept", "accept4", "getsockname",
	"getpeername", "getsockopt", "setsockopt", "shutdown", "sendto",
	"sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
	// System V IPC and POSIX message queues: the IPC namespace is the
	// sandbox's own.
	"msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
	"semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink",
	"mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
}

// Left out on purpose (many also need a capability the sandbox lacks; the
// filter keeps even their permission checks out of reach): kernel keyrings
// (keyctl, add_key, request_key: not namespaced); the mount API and
// namespace entry (mount, umount2, pivot_root, chroot, open_tree,
// move_mount, fs*, mount_setattr, unshare, setns, clone3); ptrace,
// process_vm_readv/writev, process_madvise, kcmp, pidfd_getfd; bpf and
// perf_event_open; kexec and modules; host clocks and settings (above);
// open_by_handle_at and name_to_handle_at (the "shocker" escape); userfaultfd
// (widens kernel race windows for exploits); io_uring (a long run of kernel
// privilege escalations, and it performs operations seccomp never sees);
// modify_ldt (a 16-bit segment interface with a history of kernel bugs);
// lsm_*, listmount and statmount (host security and mount details); and the
// obsolete uselib, ustat, sysfs, _sysctl, nfsservctl.

// archSyscalls are allowed only on one GOARCH.
var archSyscalls = map[string][]string{
	// The Go runtime and glibc set the thread pointer with it.
	"amd64": {"arch_prctl"},
}

// nativeArches are the syscall ABIs the filter covers on each GOARCH: the
// 64-bit one alone, as systemd's SystemCallArchitectures=native. A syscall
// made through another ABI (a 32-bit x86 or arm binary, an x32 one, or int
// 0x80 from a 64-bit process) kills the thread: libseccomp's action for an
// architecture the filter does not name. Docker also covers those ABIs;
// jaild does not, for two reasons:
//   - the 32-bit x86 ABI reaches sockets through socketcall, whose
//     arguments are in memory seccomp cannot read, and libseccomp turns
//     every rule on socket into one on socketcall(SYS_SOCKET) there,
//     dropping the family check (abi_rule_add in its syscalls.c): allowing
//     it would reopen every address family;
//   - libseccomp compiles the filter in every sandbox's init, and a second
//     ABI more than triples that time, a sizeable share of a whole sandbox
//     start (docs/performance.md has the figures).
//
// So the list holds no 32-bit-only names (chown32, fcntl64, *_time64, ...).
var nativeArches = map[string][]string{
	"amd64": {"amd64"},
	"arm64": {"arm64"},
}

// socketFamilies are the address families socket accepts:
// local sockets, IP on the sandbox's own loopback, and netlink, which libc
// uses to list interfaces and addresses (getaddrinfo, getifaddrs). Every
// other family (AF_VSOCK, which the network namespace does not cover and
// which reaches the host VM's vsock port space; AF_PACKET; AF_ALG;
// AF_BLUETOOTH; ...) fails with EAFNOSUPPORT, as on a kernel built without
// it: programs that probe a family take that as "not here" and carry on,
// where EPERM would read as a permission problem.
var socketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// safePersonalities are the execution domains personality(2) may set, as in
// Docker's profile: PER_LINUX, PER_LINUX32 (uname -m reports 32-bit),
// UNAME26, their combination, and 0xffffffff, which only reads the current
// value. Others, like READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE, weaken
// protections of the process's own memory layout.
var safePersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// cloneNamespaceFlags are every CLONE_NEW* flag clone(2) takes (0x7E020000,
// as Docker masks): a new user namespace would hand the command a fresh set
// of capabilities over kernel code paths, and the others need one.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

func seccompProfile() *configs.Seccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	eafnosupport := uint(unix.EAFNOSUPPORT)
	s := &configs.Seccomp{
		DefaultAction:   configs.Errno,
		DefaultErrnoRet: &eperm,
		Architectures:   nativeArches[runtime.GOARCH],
	}
	allow := func(names ...string) {
		for _, name := range names {
			s.Syscalls = append(s.Syscalls, &configs.Syscall{Name: name, Action: configs.Allow})
		}
	}
	allow(allowedSyscalls...)
	allow(archSyscalls[runtime.GOARCH]...)

	// Argument checks. runc turns several conditions on one argument into
	// separate rules, any of which may match, so each rule here has one.
	arg0 := func(name string, act configs.Action, errno *uint, op configs.Operator, v, v2 uint64) {
		s.Syscalls = append(s.Syscalls, &configs.Syscall{
			Name: name, Action: act, ErrnoRet: errno,
			Args: []*configs.Arg{{Index: 0, Value: v, ValueTwo: v2, Op: op}},
		})
	}
	// Every value of the family argument falls in exactly one rule: the
	// allowed families, the gaps between them as aligned blocks a mask can
	// match, and everything above. The comparisons are on the whole 64-bit
	// register, so a family with high bits set (which the kernel would
	// truncate to an int) never equals an allowed one. Few rules, because
	// libseccomp compiles each one in every sandbox's init. socketpair only
	// works for AF_UNIX; the kernel refuses the other three anyway.
	families := func(name string, allowed []uint64) {
		var next uint64
		for _, f := range slices.Sorted(slices.Values(allowed)) {
			for _, b := range alignedBlocks(next, f) {
				arg0(name, configs.Errno, &eafnosupport, configs.MaskEqualTo, ^(b.size - 1), b.start)
			}
			arg0(name, configs.Allow, nil, configs.EqualTo, f, 0)
			next = f + 1
		}
		arg0(name, configs.Errno, &eafnosupport, configs.GreaterThan, next-1, 0)
	}
	families("socket", socketFamilies)
	families("socketpair", []uint64{unix.AF_UNIX})
	for _, p := range safePersonalities {
		arg0("personality", configs.Allow, nil, configs.EqualTo, p, 0)
	}
	s.Syscalls = append(s.Syscalls,
		// Threads and fork(2) as glibc and Go make them; any namespace
		// flag gets EPERM.
		&configs.Syscall{Name: "clone", Action: configs.Allow, Args: []*configs.Arg{
			{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: configs.MaskEqualTo},
		}},
		// clone3 passes its flags in memory seccomp cannot read, so it
		// cannot be allowed without its namespace flags; ENOSYS makes libc
		// fall back to clone (as runc's and Docker's profiles do).
		&configs.Syscall{Name: "clone3", Action: configs.Errno, ErrnoRet: &enosys},
	)
	return s
}

type block struct{ start, size uint64 }

// alignedBlocks covers [lo, hi) with blocks of a power-of-two size, each
// starting at a multiple of its size, so that value&^(size-1) == start
// matches exactly one block: the fewest such blocks, as in CIDR notation.
func alignedBlocks(lo, hi uint64) []block {
	var bs []block
	for lo < hi {
		size := uint64(1)
		for lo%(size*2) == 0 && lo+size*2 <= hi {
			size *= 2
		}
		bs = append(bs, block{lo, size})
		lo += size
	}
	return bs
}
