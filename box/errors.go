package box

import (
	"errors"
	"fmt"
	"time"
)

// Errors a caller may test for with [errors.Is].
var (
	// ErrNotRoot: jaild needs root on the host to build sandboxes.
	ErrNotRoot = errors.New("jail: must run as root")
	// ErrUnsupported: the host lacks something a sandbox needs (user
	// namespaces, a cgroup controller, seccomp support).
	ErrUnsupported = errors.New("jail: host does not support sandboxes")
	// ErrRootfs: the root filesystem is missing or unusable.
	ErrRootfs = errors.New("jail: bad root filesystem")
	// ErrCommandNotFound: the command does not exist inside the sandbox.
	ErrCommandNotFound = errors.New("jail: command not found")
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

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrBusy is the refusal of a run that can neither start nor wait: the
// admission queue is full, or the run waited its maximum in it. Front ends
// answer it with "try again later" (HTTP 429 with Retry-After). Admission
// control returns a *BusyError, which matches ErrBusy with errors.Is.
var ErrBusy = errors.New("too many sandboxes running, try again later")

// ErrUnavailable: nothing can build sandboxes for a moment (the daemon's
// worker died and is being restarted). Front ends answer it with "try again
// shortly" (HTTP 503 with Retry-After); the worker's errors match it with
// errors.Is.
var ErrUnavailable = errors.New("sandboxes are unavailable for a moment, try again shortly")

// BusyError is ErrBusy with an estimate of when a slot may be free.
type BusyError struct {
	// RetryAfter is how long the queue ahead should take to drain, from
	// the recent runs' duration; at least a second.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string { return ErrBusy.Error() }

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Errors of session requests, as front ends answer them. Package session
// has its own sentinels; the run chain and the server mark its errors with
// these (see [Mark]), so that this package stays free of it.
var (
	// ErrNotFound: the request names a session or job its caller does
	// not have (never had, deleted, expired, or lost with its worker).
	// Another caller's session is this too: ids cannot be probed.
	ErrNotFound = errors.New("no such session")
	// ErrLimit: a maximum number of sessions (per daemon, per caller) or
	// of jobs per session is reached.
	ErrLimit = errors.New("limit reached")
	// ErrSessionLost: the session's node (in a fleet, the daemon that
	// created it) is gone, and its workspace with it: unlike
	// ErrNotFound, the caller had it until then, and must start anew.
	ErrSessionLost = errors.New("session lost with its node")
)

// Mark gives err the identity of kind for errors.Is, keeping err's own
// message and identity.
func Mark(err, kind error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, kind: kind}
}

type marked struct{ err, kind error }

func (m *marked) Error() string { return m.err.Error() }

func (m *marked) Unwrap() []error { return []error{m.err, m.kind} }
