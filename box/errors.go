package box

import (
	"errors"
	"fmt"
	"time"
)

// The error classes of a run, in the manner of containerd's errdefs: every
// layer returns (or wraps, or marks with [Mark]) one of these, callers test
// them with [errors.Is] or [errors.As], and package api maps each class to
// exactly one wire code, HTTP status and exit status, in one table. A class
// says what went wrong, not which layer noticed it.

// InvalidError is the class "invalid argument": a value of the request that
// cannot be used, whichever layer refused it (the wire decoder, the
// operator's maxima, the engine).
type InvalidError struct {
	// Field is the request property at fault, spelled as on the wire:
	// "memory_bytes", "timeout_ms", "cwd", "command", ...; a Go caller's
	// Limits.Memory is "memory_bytes" too.
	Field  string
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

// Errors of the command itself: it was run as asked, and could not start.
var (
	// ErrCommandNotFound: the command does not exist inside the sandbox.
	ErrCommandNotFound = errors.New("jail: command not found")
	// ErrNotExecutable: the command exists but cannot be executed.
	ErrNotExecutable = errors.New("jail: command not executable")
)

// Errors of what a request names.
var (
	// ErrNotFound: the request names a session or job its caller does
	// not have (never had, deleted, expired, or lost with its worker).
	// Another caller's session is this too: ids cannot be probed.
	ErrNotFound = errors.New("no such session")
	// ErrSessionLost: the session's node (in a fleet, the daemon that
	// created it) is gone, and its workspace with it: unlike
	// ErrNotFound, the caller had it until then, and must start anew.
	ErrSessionLost = errors.New("session lost with its node")
	// ErrLimit: a maximum number of sessions (per daemon, per caller) or
	// of jobs per session is reached: the request conflicts with what
	// the caller already has.
	ErrLimit = errors.New("limit reached")
)

// Errors of capacity: the same request may succeed later.
var (
	// ErrBusy is the refusal of a run that can neither start nor wait:
	// the admission queue is full, or the run waited its maximum in it.
	// Front ends answer it with "try again later" (HTTP 429 with
	// Retry-After). Admission control returns a *BusyError, which
	// matches ErrBusy with errors.Is.
	ErrBusy = errors.New("too many sandboxes running, try again later")
	// ErrUnavailable: nothing can build sandboxes for a moment (the
	// daemon's worker died and is being restarted). Front ends answer it
	// with "try again shortly" (HTTP 503 with Retry-After); the worker's
	// errors match it with errors.Is.
	ErrUnavailable = errors.New("sandboxes are unavailable for a moment, try again shortly")
	// ErrPidsBudget: a sandbox could not start because no process could
	// be made for it: the sandboxes' parent cgroup's pids budget is used
	// up by the sandboxes running (or the host's own process limits are
	// reached). Nothing ran; the same request may succeed once some
	// sandboxes end. Front ends answer it as busy, with 503: the host,
	// not the caller's rate, is at capacity.
	ErrPidsBudget = errors.New("jail: no process left for a new sandbox: the sandboxes' pids budget is used up; try again later")
	// ErrClosed: the Manager, a sandbox or a workspace was already
	// closed, or closed under the run (the daemon is stopping).
	ErrClosed = errors.New("jail: closed")
)

// BusyError is ErrBusy with an estimate of when a slot may be free.
type BusyError struct {
	// RetryAfter is how long the queue ahead should take to drain, from
	// the recent runs' duration; at least a second.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string { return ErrBusy.Error() }

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Errors of the host: the operator's to fix, whatever the request.
var (
	// ErrNotRoot: jaild needs root on the host to build sandboxes.
	ErrNotRoot = errors.New("jail: must run as root")
	// ErrUnsupported: the host lacks something a sandbox needs (user
	// namespaces, a cgroup controller, seccomp support).
	ErrUnsupported = errors.New("jail: host does not support sandboxes")
	// ErrRootfs: the root filesystem is missing or unusable.
	ErrRootfs = errors.New("jail: bad root filesystem")
	// ErrUntrusted: a user other than root could change the state dir,
	// the slot dir or the rootfs, or a parent of one of them.
	ErrUntrusted = errors.New("jail: directory not safe from other users")
)

// Mark gives err the identity of class for errors.Is, keeping err's own
// message and identity: a package with sentinels of its own (package
// session's) is classified without depending on this one.
func Mark(err, class error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: class}
}

type marked struct{ err, class error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.class} }
