package jail

import "errors"

// Errors a caller may test for with [errors.Is].
var (
	// ErrNotRoot: jaild needs root on the host to build sandboxes.
	ErrNotRoot = errors.New("jail: must run as root")
	// ErrUnsupported: the host lacks something a sandbox needs (user
	// namespaces, a cgroup controller, seccomp support).
	ErrUnsupported = errors.New("jail: host does not support sandboxes")
	// ErrRootfs: the root filesystem is missing or unusable.
	ErrRootfs = errors.New("jail: bad root filesystem")
	// ErrNotFound: the command does not exist inside the sandbox.
	ErrNotFound = errors.New("jail: command not found")
	// ErrNotExecutable: the command exists but cannot be executed.
	ErrNotExecutable = errors.New("jail: command not executable")
	// ErrUntrusted: a user other than root could change the state dir,
	// the slot dir or the rootfs, or a parent of one of them.
	ErrUntrusted = errors.New("jail: directory not safe from other users")
	// ErrClosed: the Manager, a sandbox or a workspace was already closed.
	ErrClosed = errors.New("jail: closed")
)

// InvalidError reports a Spec, Command or Limits field that cannot be used.
type InvalidError struct {
	Field  string // "memory", "command", "cwd", ...
	Reason string
}

func (e *InvalidError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// IsInvalid reports whether err is, or wraps, an *InvalidError.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}
