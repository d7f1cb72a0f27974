package run

import (
	"context"
	"sync"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/session"
)

// Base runs one spec in a fresh sandbox and tears it down: the jail at the
// end of the chain (*jail.Manager, *jail.Pool).
type Base interface {
	Run(ctx context.Context, spec *jail.Spec) (*box.Result, error)
}

// Runner runs one request: the chain, and each of its links.
type Runner interface {
	Run(ctx context.Context, req *Request) (*box.Result, error)
}

// Request is one run on its way through the chain: the spec, who asked and
// through what (for the audit log, and the policy), and the front end's
// hooks. The chain's links fill in Spec's unset limits on a copy, never on
// the caller's spec.
type Request struct {
	Spec *jail.Spec

	// Caller names the caller for the audit log and the policy: the
	// token's name, or the peer when the daemon runs without tokens
	// ("uid:1000", "127.0.0.1"); caller.ID's String. It is not an
	// identity: Owner is. RequestID is the front end's id of the request.
	Caller    string
	RequestID string
	// FrontEnd names the way in: "run", "raw", "mcp:bash", "mcp:execute".
	FrontEnd string
	// Shell is the shell command line the request was, in shell mode
	// (Spec.Args is then the shell and its -c): the policy parses it.
	Shell string
	// Description is what the caller said the command is for (the MCP
	// bash tool's description).
	Description string
	// TimeoutField, TimeoutValue and TimeoutUnit are the timeout as the
	// caller gave it ("timeout_seconds", 601, time.Second), for the
	// message that refuses one above the maximum. Empty TimeoutField:
	// Spec.Timeout, named timeout_ms, in milliseconds.
	TimeoutField string
	TimeoutValue int64
	TimeoutUnit  time.Duration
	// Tool marks an agent tool's call (the MCP tools), whose timeout
	// follows their convention (see DefaultToolTimeout): unset, the
	// tools' default; above their maximum, reduced to it, not refused.
	Tool bool
	// Timeout is the timeout the run got, once the chain's maxima
	// accepted it; set by the chain.
	Timeout time.Duration
	// Egress is the request's egress field: nil for none given (the
	// daemon's --egress-default decides), else what it asks for.
	Egress *api.Egress

	// SessionID, if set, runs the request in that session of Owner's
	// (see ChainOptions.Sessions): a fresh sandbox on the session's
	// workspace, directory and environment. Background starts it as a
	// background job of the session instead of waiting for it: the
	// chain then returns a nil result and sets JobID.
	SessionID  string
	Background bool
	JobID      string
	// Owner is who the caller is, whose sessions it may use: compared
	// whole with the session's owner. The zero ID owns no session.
	Owner caller.ID

	// OnAdmit, if not nil, is called once the run leaves the admission
	// queue, before its sandbox is built: /raw then tells its client the
	// run started, and until then may still answer "busy" with a status.
	OnAdmit func()
	// KeepOutput keeps the run's output memory reserved after Run
	// returns, until ReleaseOutput: a front end that writes the result
	// sets it, so that admission counts the result until it is written.
	KeepOutput bool

	// Admitted is when admission let the run in; set by the chain.
	Admitted time.Time

	mu       sync.Mutex
	release  func()
	released bool
	// jobOutput releases the output memory of a background job's start:
	// the job takes it (takeJobOutput) and lets it go once its output is
	// no longer kept.
	jobOutput func()
}

// takeJobOutput hands over the release of a background start's output
// memory; nil if there is none or it was taken.
func (r *Request) takeJobOutput() func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	rel := r.jobOutput
	r.jobOutput = nil
	return rel
}

// admit marks the run admitted and calls OnAdmit.
func (r *Request) admit() {
	r.Admitted = time.Now()
	if r.OnAdmit != nil {
		r.OnAdmit()
	}
}

// holdOutput hands the request the release of its output memory, or calls
// it at once if the output was already let go.
func (r *Request) holdOutput(release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		release()
		return
	}
	r.release = release
}

// ReleaseOutput lets the output memory KeepOutput kept go. Safe to call
// more than once, and when nothing was kept.
func (r *Request) ReleaseOutput() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.released && r.release != nil {
		r.release()
	}
	r.released = true
}

// baseRunner runs requests on the base, or in their session: the end of
// the chain. policy, if not nil, decides the requests in a session (see
// withPolicy).
type baseRunner struct {
	base     Base
	sessions *session.Manager
	policy   *policy.Engine
}

func (b baseRunner) Run(ctx context.Context, req *Request) (*box.Result, error) {
	if req.SessionID != "" || req.Background {
		return runInSession(ctx, b.sessions, b.policy, req)
	}
	return b.base.Run(ctx, req.Spec)
}
