package jail

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// Defaults for a [Spec] whose fields are left zero. They are deliberately
// small: a caller who needs more asks for it, and an operator can cap what
// callers may ask for.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMemory    = 256 << 20 // bytes, no swap
	DefaultPids      = 256
	DefaultCPUs      = 1.0
	DefaultTmpfsSize = 64 << 20 // bytes, for each of the working directory and /tmp
	DefaultMaxOutput = 1 << 20  // bytes kept per stream
	// DefaultDir is the sandbox's working directory unless the Manager's
	// Config.WorkDir names another (see ValidateWorkDir).
	DefaultDir = "/work"

	// SandboxUID and SandboxGID are the ids the command runs as inside the
	// sandbox. Container root (uid 0) exists only to set the sandbox up.
	SandboxUID = 1000
	SandboxGID = 1000

	// Hostname is the UTS hostname every sandbox sees.
	Hostname = "jaild"

	// Path is the fixed PATH the command starts with unless Env sets one.
	Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Upper bounds that no Limits may exceed, whatever an operator configures.
const (
	MaxTimeout = 24 * time.Hour
	minMemory  = 4 << 20 // below this the init process itself cannot start
	// maxPids is the kernel's ceiling for a pids limit (PID_MAX_LIMIT).
	maxPids = 1 << 22
	// maxCPUs is far above any host's cores, and far below where the CFS
	// quota (cores times a 100 ms period) would leave the kernel's range
	// or overflow.
	maxCPUs = 1 << 16
)

// Limits are the resources of one sandbox. They are fixed when the sandbox is
// created (see Manager.create), so a pool can create sandboxes ahead of
// time. The zero value of each field means its Default*.
type Limits struct {
	// Memory is the cgroup memory limit in bytes, with swap disabled.
	// Tmpfs pages written in the working directory and /tmp count
	// against it too.
	Memory int64
	// Pids is the maximum number of processes and threads.
	Pids int64
	// CPUs is the CPU quota in cores (1.5 = one and a half cores).
	CPUs float64
	// TmpfsSize caps each of the working directory's and /tmp's tmpfs
	// mounts, in bytes.
	TmpfsSize int64
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.CPUs == 0 {
		l.CPUs = DefaultCPUs
	}
	if l.TmpfsSize == 0 {
		l.TmpfsSize = DefaultTmpfsSize
	}
	return l
}

// Validate reports the first limit that is negative, too small to start a
// sandbox or beyond what the kernel takes. It treats zero as "default", so
// it accepts the zero Limits.
func (l Limits) Validate() error {
	switch {
	case l.Memory < 0 || (l.Memory > 0 && l.Memory < minMemory):
		return invalid("memory", "%d bytes: must be at least %d", l.Memory, minMemory)
	case l.Pids < 0 || (l.Pids > 0 && l.Pids < 2) || l.Pids > maxPids:
		return invalid("pids", "%d: must be between 2 and %d", l.Pids, maxPids)
	case l.CPUs != 0 && !(l.CPUs >= 0.01 && l.CPUs <= maxCPUs): // NaN fails both
		return invalid("cpus", "%g: must be between 0.01 and %d", l.CPUs, maxCPUs)
	case l.TmpfsSize < 0 || (l.TmpfsSize > 0 && l.TmpfsSize < 4096):
		return invalid("tmpfs size", "%d bytes: must be at least 4096", l.TmpfsSize)
	}
	return nil
}

// Within reports the first limit of l (after defaults) that exceeds max.
// A zero field of max means no maximum for that limit.
func (l Limits) Within(max Limits) error {
	l = l.WithDefaults()
	switch {
	case max.Memory > 0 && l.Memory > max.Memory:
		return invalid("memory", "%d bytes exceeds the maximum of %d", l.Memory, max.Memory)
	case max.Pids > 0 && l.Pids > max.Pids:
		return invalid("pids", "%d exceeds the maximum of %d", l.Pids, max.Pids)
	case max.CPUs > 0 && l.CPUs > max.CPUs:
		return invalid("cpus", "%g exceeds the maximum of %g", l.CPUs, max.CPUs)
	case max.TmpfsSize > 0 && l.TmpfsSize > max.TmpfsSize:
		return invalid("tmpfs size", "%d bytes exceeds the maximum of %d", l.TmpfsSize, max.TmpfsSize)
	}
	return nil
}

// Command is what runs inside a sandbox, modelled on [os/exec.Cmd]. It is
// handed to a sandbox at run time (sandbox.Run).
type Command struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH
	// inside the sandbox. Required. No shell is involved: to run a shell
	// string use []string{"/bin/sh", "-c", s}.
	Args []string

	// Env holds extra KEY=VALUE pairs. The command's environment is
	// PATH, HOME (the working directory), USER, LANG and these, which
	// override the fixed ones; nothing of jaild's own environment is
	// passed.
	Env []string

	// Dir is the working directory inside the sandbox; it must be the
	// sandbox's working directory (the Manager's Config.WorkDir, /work by
	// default), /tmp or below them (see CheckDir). Empty means the
	// working directory.
	Dir string

	// Stdin is the command's standard input. Nil means /dev/null. An
	// *os.File is handed over directly; any other reader is copied by a
	// goroutine that is abandoned (like os/exec's) if it still blocks in
	// Read after the command ends.
	Stdin io.Reader

	// Stdout and Stderr, if non-nil, receive each chunk of output as it is
	// produced, in addition to what Result keeps. A slow writer slows the
	// command down (the pipe fills), never the other way round; the
	// timeout still applies.
	Stdout, Stderr io.Writer

	// Timeout bounds the wall-clock run time; zero means DefaultTimeout.
	// When it expires every process of the sandbox is killed and Result
	// still carries the output produced so far.
	Timeout time.Duration

	// ExtraFiles are open files the command inherits as fds 3, 4, ...,
	// like os/exec's. The sandbox gets duplicates: the caller keeps and
	// closes its own, and a reader of a pipe whose write end is passed
	// sees EOF once the caller has closed its end and the sandbox is
	// gone. The files are handed over as they are, so a file the
	// command must reopen through /proc/self/fd must be owned by the
	// sandbox's user.
	ExtraFiles []*os.File

	// MaxOutput is how many bytes of each stream Result keeps; zero means
	// DefaultMaxOutput. Beyond it the head and the tail are kept with a
	// marker between them (see [Elide]); the rest is read and dropped, so
	// the command never blocks and memory does not grow with output size.
	MaxOutput int64
}

// Validate reports the first field of c that cannot be run in any
// sandbox. Whether Dir is writable depends on the sandbox's working
// directory, which the Manager checks (see CheckDir).
func (c *Command) Validate() error {
	if len(c.Args) == 0 || c.Args[0] == "" {
		return invalid("command", "missing")
	}
	for _, a := range c.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("command", "argument contains a NUL byte")
		}
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return invalid("env", "%q is not KEY=VALUE", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return invalid("env", "%s contains a NUL byte", k)
		}
	}
	if c.Dir != "" {
		if strings.IndexByte(c.Dir, 0) >= 0 {
			return invalid("cwd", "contains a NUL byte")
		}
		if !path.IsAbs(c.Dir) {
			return invalid("cwd", "%q is not absolute", c.Dir)
		}
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		return invalid("timeout", "%v: must be between 0 and %v", c.Timeout, MaxTimeout)
	}
	if c.MaxOutput < 0 {
		return invalid("max output", "%d: must not be negative", c.MaxOutput)
	}
	return nil
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// CheckDir reports whether a command may start in dir in a sandbox whose
// working directory is workDir (empty: DefaultDir): dir must be workDir,
// /tmp or below them, the only places a sandbox writes. Empty dir means
// workDir. The error is an *InvalidError of field "cwd".
func CheckDir(dir, workDir string) error {
	if workDir == "" {
		workDir = DefaultDir
	}
	if dir == "" {
		return nil
	}
	if strings.IndexByte(dir, 0) >= 0 {
		return invalid("cwd", "contains a NUL byte")
	}
	if !path.IsAbs(dir) {
		return invalid("cwd", "%q is not absolute", dir)
	}
	if d := path.Clean(dir); !within(d, workDir) && !within(d, "/tmp") {
		return invalid("cwd", "%q is outside the sandbox's writable dirs %s and /tmp", dir, workDir)
	}
	return nil
}

// Spec is one run: a command in a fresh sandbox with the given limits, as
// [Manager.Run] takes it.
type Spec struct {
	Limits Limits
	// Workspace, if not nil, gives the sandbox the workspace's working
	// directory, network namespace and uid range instead of a fresh tmpfs and
	// a network namespace of its own with only loopback (see
	// [Workspace]); every other namespace, limit and filter is the
	// sandbox's own as always.
	Workspace *Workspace
	// Egress, if not nil, gives the sandbox a proxy endpoint on its
	// loopback that the caller serves, and no other way out (see
	// [Egress]). Not available on a workspace.
	Egress *Egress
	Command
}

// Validate checks both the limits and the command.
func (s *Spec) Validate() error {
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	if err := validateEgress(s); err != nil {
		return err
	}
	return s.Command.Validate()
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
