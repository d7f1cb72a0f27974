package api

import "errors"

// Errors of session requests, as front ends answer them. Package session
// has its own sentinels; the run chain and the server mark its errors with
// these (see [Mark]), so that this package stays free of it.
var (
	// ErrNoSession: the request names a session or job its caller does
	// not have (never had, deleted, expired, or lost with its worker).
	// Another caller's session is this too: ids cannot be probed.
	ErrNoSession = errors.New("no such session")
	// ErrLimit: a maximum number of sessions (per daemon, per caller) or
	// of jobs per session is reached.
	ErrLimit = errors.New("limit reached")
	// ErrSessionLost: the session's node (in a fleet, the daemon that
	// created it) is gone, and its workspace with it: unlike
	// ErrNoSession, the caller had it until then, and must start anew.
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

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.kind} }
