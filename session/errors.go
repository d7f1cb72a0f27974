package session

import (
	"errors"
	"fmt"
)

// Errors a caller may test for with [errors.Is].
var (
	// ErrNotFound: no such session (or it belongs to another owner, which
	// a caller must not be able to tell apart), or no such job.
	ErrNotFound = errors.New("session: not found")
	// ErrLimit: a maximum number of sessions or jobs is reached; the
	// error is a *LimitError that says which.
	ErrLimit = errors.New("session: limit reached")
	// ErrClosed: the Manager is closed, or the session is being removed.
	ErrClosed = errors.New("session: closed")
	// ErrDraining: the Manager is draining (Manager.Drain) and makes no
	// new session; another daemon should.
	ErrDraining = errors.New("session: draining, no new sessions")
	// ErrKilled: a job ended because Kill killed it (its error, which
	// reads "killed").
	ErrKilled = errors.New("killed")
)

// LimitError says which maximum a Create or Start hit.
type LimitError struct {
	What string // "sessions", "sessions per owner", "jobs per session"
	Max  int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("session: too many %s (maximum %d)", e.What, e.Max)
}

func (e *LimitError) Is(target error) bool { return target == ErrLimit }
