package jail

import (
	"runtime"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside every sandbox. The default action is
// allow: a deny list keeps every ordinary program working while closing the
// kernel interfaces a sandboxed command never needs and that carry most of
// the kernel's container-escape history. Most of them already need a
// capability the sandbox lacks; seccomp removes the attack surface of even
// reaching their permission checks.
var deniedSyscalls = []string{
	// Kernel keyrings are not namespaced.
	"keyctl", "add_key", "request_key",
	// Mount table changes (also need CAP_SYS_ADMIN in the user namespace).
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr",
	// Namespace creation and entry: a new user namespace would hand the
	// command a fresh set of capabilities over kernel code paths.
	"unshare", "setns",
	// Tracing and reading other processes' memory.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	// eBPF and perf: large kernel attack surface.
	"bpf", "perf_event_open",
	// Kernel replacement and modules.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	// Host-wide state.
	"reboot", "swapon", "swapoff", "syslog", "acct", "settimeofday",
	"clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
	"iopl", "ioperm", "quotactl", "vhangup", "lookup_dcookie",
	// File handles bypass path-based checks (the "shocker" escape).
	"open_by_handle_at", "name_to_handle_at",
	// userfaultfd widens kernel race windows for exploits; io_uring has
	// been the source of a long run of kernel privilege escalations (and
	// bypasses seccomp for the operations it performs).
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	// Obsolete interfaces.
	"uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
}

// nativeArches are the syscall ABIs a process on each GOARCH can use; a
// filter that left one out would let a 32-bit binary bypass it.
var nativeArches = map[string][]string{
	"amd64": {"amd64", "x86", "x32"},
	"arm64": {"arm64", "arm"},
}

func seccompProfile() *configs.Seccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	s := &configs.Seccomp{
		DefaultAction: configs.Allow,
		Architectures: nativeArches[runtime.GOARCH],
	}
	for _, name := range deniedSyscalls {
		s.Syscalls = append(s.Syscalls, &configs.Syscall{Name: name, Action: configs.Errno, ErrnoRet: &eperm})
	}
	// clone with CLONE_NEWUSER is unshare by another name. clone3 passes
	// its flags in memory seccomp cannot read, so it gets ENOSYS, which
	// makes libc fall back to clone (as runc's and Docker's profiles do).
	s.Syscalls = append(s.Syscalls,
		&configs.Syscall{Name: "clone", Action: configs.Errno, ErrnoRet: &eperm, Args: []*configs.Arg{
			{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: configs.MaskEqualTo},
		}},
		&configs.Syscall{Name: "clone3", Action: configs.Errno, ErrnoRet: &enosys},
	)
	return s
}
