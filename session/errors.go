package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/jaild/jaild/caller"
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
	// ErrExpired: the session was removed because it expired (Session.Err).
	ErrExpired = errors.New("session: expired")
	// ErrEvicted: the session was removed to make room for another of its
	// owner's (Options.Attached; Session.Err).
	ErrEvicted = errors.New("session: evicted")
)

// RemovedError is a removed session's Err: why it was removed.
type RemovedError struct {
	// Err is ErrExpired, ErrEvicted, ErrNotFound (deleted, or its
	// workspace lost) or ErrClosed (the Manager closed).
	Err error
	// Reason says it in words, as "it expired after 5m0s idle".
	Reason string
}

func (e *RemovedError) Error() string { return e.Err.Error() + ": " + e.Reason }

func (e *RemovedError) Unwrap() error { return e.Err }

// LimitError says which maximum a Create or Start hit and, for a Create,
// what the owner holds, so that a front end can say how to free a place.
type LimitError struct {
	// What is "sessions" (the daemon's), "sessions per owner",
	// "attached sessions per owner" or "jobs per session".
	What string
	Max  int
	// Owner is who asked for a session; Kept and Attached count its
	// sessions of each kind (Options.Attached), those being made
	// included. Zero for jobs.
	Owner          caller.ID
	Kept, Attached int
	// Idle is how long the owner's session idle the longest, of the
	// kinds the limit counts, has run nothing (and, if attached, been
	// held by nothing), and TTL is that session's idle TTL: it expires
	// after TTL-Idle. Both zero if none is idle.
	Idle, TTL time.Duration
}

func (e *LimitError) Error() string {
	msg := fmt.Sprintf("session: too many %s (maximum %d)", e.What, e.Max)
	if e.Owner.IsZero() {
		return msg
	}
	msg += fmt.Sprintf(": %s holds %d sessions and %d attached ones (each counted against its own quota); ", e.Owner, e.Kept, e.Attached)
	if e.Idle == 0 {
		return msg + "none of them is idle"
	}
	return msg + fmt.Sprintf("the one idle the longest has been for %v and expires in %v", e.Idle.Round(time.Second), max(e.TTL-e.Idle, 0).Round(time.Second))
}

func (e *LimitError) Is(target error) bool { return target == ErrLimit }
