package run

import (
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/session"
)

// Chain builds the daemon's runner chain around base (the jail), and the
// session manager for requests that name a session:
//
//	maxima -> Audit -> Egress -> Decide(policy) -> Admit -> Instrument -> base, or the session
//
// The maxima come first so that invalid requests are refused before they wait
// for a slot and audit records and the policy see effective limits; Audit
// sees refused and denied runs too; the policy decides before a run takes a
// place in the queue, except a run in a session, which it decides at the
// end, on the call the session builds (its environment, directory and
// workspace are only known there: see withPolicy); instrument sits inside
// admission to count only what reached the jail. Audit, Policy and Metrics
// may be nil (none).
//
// Each link serves both ways of running (see [Runner]): Run, and Start,
// which goes through the same links to a background job of the request's
// session. A link that changes the request passes a copy on; none writes
// to the caller's.
func Chain(base Base, c ChainOptions) (Runner, error) {
	if err := c.Max.Validate(); err != nil {
		return nil, err
	}
	c.Admission.Metrics = c.Metrics
	if u, ok := base.(interface{ Up() <-chan struct{} }); ok && c.Admission.BaseUp == nil {
		// The daemon's worker: queued runs wait for it to restart.
		c.Admission.BaseUp = u.Up
	}
	c.Metrics.observeSessions(c.Sessions)
	adm, err := Admit(instrument(baseRunner{base: base, sessions: c.Sessions, policy: c.Policy}, c.Metrics), c.Admission)
	if err != nil {
		return nil, err
	}
	var r Runner = adm
	if c.Policy != nil {
		r = withPolicy(r, c.Policy)
	}
	// Always linked: without a proxy it refuses the requests that ask
	// for egress rather than run them without.
	r = withEgress(r, c.Egress)
	if c.Audit != nil {
		r = Audit(r, c.Audit)
	}
	return &enforcer{next: r, max: c.Max, audit: c.Audit, sessions: c.Sessions, workDir: c.WorkDir}, nil
}

// ChainOptions configure [Chain]. Audit may be nil (no audit log), and so
// may Policy (every command allowed) and Metrics.
type ChainOptions struct {
	Max       Maxima
	Admission AdmitOptions
	Audit     *AuditLog
	Policy    *policy.Engine
	Metrics   *Metrics
	// Sessions runs the requests that name a session (Request.SessionID)
	// and the background starts (Runner.Start); nil refuses them.
	Sessions *session.Manager
	// Egress is the daemon's egress configuration; the zero value gives
	// no run any network.
	Egress EgressOptions
	// WorkDir is the sandboxes' working directory (the jail's
	// Config.WorkDir); empty means box.DefaultDir. A request's cwd must
	// be it, /tmp or below them (box.CheckDir), or it is refused before
	// anything else.
	WorkDir string
}
