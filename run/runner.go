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

// Runner runs requests: the chain, and each of its links. Like os/exec's
// Cmd it has two ways to run a command. Run runs it and waits for its
// result. Start starts it as a background job of the request's session
// (Request.SessionID) and returns the job's id once it started: the job's
// output and result are then the session's, read and waited for through
// its jobs (session.Session.Job), never through the Runner. Start never
// returns a result, nor Run a job.
//
// Neither modifies req: a link that changes what the rest of the chain
// sees (the effective limits, the egress) passes a modified copy on,
// with a Spec of its own, and leaves the caller's request and spec as
// they were. One Request value may thus be run again, or concurrently.
type Runner interface {
	Run(ctx context.Context, req Request) (*box.Result, error)
	Start(ctx context.Context, req Request) (jobID string, err error)
}

// Request is one run on its way through the chain: the spec, who asked and
// through what (for the audit log, and the policy), and the front end's
// hooks. It is a value the chain does not modify, Spec's target included
// (see [Runner]); what the chain tells the front end goes through the
// hooks (OnAdmit, KeepOutput) and the return values.
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
	// Egress is the request's egress field: nil for none given (the
	// daemon's --egress-default decides), else what it asks for.
	Egress *api.Egress

	// SessionID, if set, runs the request in that session of Owner's
	// (see ChainOptions.Sessions): a fresh sandbox on the session's
	// workspace, directory and environment. Start needs it.
	SessionID string
	// Owner is who the caller is, whose sessions it may use: compared
	// whole with the session's owner. The zero ID owns no session.
	Owner caller.ID

	// OnAdmit, if not nil, is called once the run leaves the admission
	// queue, before its sandbox is built: /raw then tells its client the
	// run started, and until then may still answer "busy" with a status.
	// It is called at most once, on the goroutine that called Run or
	// Start, before that returns.
	OnAdmit func()
	// KeepOutput, if not nil, keeps the run's output memory reserved
	// after Run returns, until KeepOutput.Release: a front end that
	// writes the result sets it, so that admission counts the result
	// until it is written. Start ignores it: a background job holds its
	// output memory until the job is forgotten.
	KeepOutput *OutputHold

	// jobOutput is the output memory of a background start, set by
	// admission on the copy it passes on, and taken by the job.
	jobOutput *jobOutput
}

// OutputHold keeps the output memory of the runs it is given to (as
// Request.KeepOutput) reserved after Run returns, until Release: a front
// end that writes a result makes one and defers its Release, so that the
// memory of a result is counted until the result is written. The zero
// value is ready to use. Release is safe to call more than once, and when
// nothing is held; a run given a hold that was released lets its memory go
// when it ends.
type OutputHold struct {
	mu       sync.Mutex
	releases []func()
	released bool
}

// keep holds release until Release, or calls it at once if the hold was
// already released.
func (h *OutputHold) keep(release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		release()
		return
	}
	h.releases = append(h.releases, release)
}

// Release lets the output memory the hold kept go.
func (h *OutputHold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, release := range h.releases {
		release()
	}
	h.releases, h.released = nil, true
}

// jobOutput hands the output memory of a background start from admission
// to the job: the job takes its release and calls it once the job is
// forgotten; if no job took it, admission lets it go when Start returns.
type jobOutput struct {
	mu      sync.Mutex
	release func()
}

// take returns the release, or nil if there is none or it was taken.
func (j *jobOutput) take() func() {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	rel := j.release
	j.release = nil
	return rel
}

// putBack returns a release that take handed out to a start that did not
// start the job, so that a retry of the start takes it again. The release
// is idempotent (sync.OnceFunc): whoever calls it first lets the memory go.
func (j *jobOutput) putBack(rel func()) {
	if j == nil || rel == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.release = rel
}

// baseRunner runs requests on the base, or in their session: the end of
// the chain. policy, if not nil, decides the requests in a session (see
// withPolicy).
type baseRunner struct {
	base     Base
	sessions *session.Manager
	policy   *policy.Engine
}

func (b baseRunner) Run(ctx context.Context, req Request) (*box.Result, error) {
	if req.SessionID != "" {
		return runInSession(ctx, b.sessions, b.policy, req)
	}
	return b.base.Run(ctx, req.Spec)
}

func (b baseRunner) Start(ctx context.Context, req Request) (string, error) {
	return startInSession(ctx, b.sessions, b.policy, req)
}
