package run

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/session"
)

// Sessions makes and changes sessions for every front end: POST and PATCH
// /sessions, and the workspace an MCP session gets. It is where their
// requests meet the operator's maxima, the egress grant and the policy, as
// a run's meet the chain, and it writes every refusal to the audit log.
type Sessions struct {
	Manager *session.Manager
	// Max bounds the sessions' limits (Limits only), as the chain's
	// bound each call's; its DefaultLimits fill the unset ones.
	Max Maxima
	// Egress is the daemon's egress configuration; Metrics, if not nil,
	// count the sessions' egress.
	Egress  EgressOptions
	Metrics *Metrics
	// Audit, if not nil, gets a record of every refusal.
	Audit *AuditLog
	// Policy, if not nil, decides the creation of a session that is not
	// attached (policy.ActionSessionCreate) and every change of a
	// session's environment (policy.ActionSessionEnv).
	Policy *policy.Engine
}

// SessionRequest asks for a new session. Zero fields are unset: the
// session manager's defaults, the maxima's for the limits.
type SessionRequest struct {
	// Caller, RequestID and Owner as in [Request]; FrontEnd names the way
	// in, as the egress proxy's records of the session do: "sessions"
	// (POST /sessions), "mcp".
	Caller    string
	RequestID string
	FrontEnd  string
	Owner     caller.ID
	// Attached makes the workspace of one connection (an MCP session):
	// session.Options.Attached. Its creation is not the policy's to
	// decide: its client gave nothing to decide on.
	Attached       bool
	TTL            time.Duration
	WorkspaceBytes int64
	Cwd            string
	Env            map[string]string
	Limits         box.Limits
	// Egress is the request's egress field: nil for none given (the
	// daemon's --egress-default decides), else what it asks for.
	Egress *api.Egress
}

// SessionEnvRequest asks to change a session's environment: Set's
// variables set, Unset's removed.
type SessionEnvRequest struct {
	Caller, RequestID string
	Session           *session.Session
	Set               map[string]string
	Unset             []string
}

// Create checks req and makes its session. A refusal is a
// *box.InvalidError naming the request's field, a policy's
// *api.DeniedError, or a session error (SessionError), and is audited.
func (s *Sessions) Create(ctx context.Context, req *SessionRequest) (*session.Session, error) {
	sess, err := s.create(ctx, req)
	if err != nil {
		err = SessionError(err)
		s.refusedSession(req, err)
	}
	return sess, err
}

func (s *Sessions) create(ctx context.Context, req *SessionRequest) (*session.Session, error) {
	o, err := s.options(req)
	if err != nil {
		return nil, err
	}
	if !req.Attached && s.Policy != nil {
		cwd := o.Cwd
		if cwd == "" {
			cwd = s.Manager.WorkDir()
		}
		in := policy.Input{Action: policy.ActionSessionCreate, Env: req.Env, Cwd: cwd, Caller: req.Caller, FrontEnd: actionFrontEnd}
		if err := decided(ctx, s.Policy, req.RequestID, in); err != nil {
			return nil, err
		}
	}
	return s.Manager.Create(ctx, o)
}

// options turns req into the session's options: every variable by
// execve's rule (box.CheckEnv, as a run's), the limits positive and
// within the maxima, unset ones the maxima's defaults, the egress granted.
func (s *Sessions) options(req *SessionRequest) (session.Options, error) {
	o := session.Options{Owner: req.Owner, Attached: req.Attached, TTL: req.TTL, WorkspaceBytes: req.WorkspaceBytes, Cwd: req.Cwd}
	var err error
	if o.Env, err = box.EnvList(req.Env); err != nil {
		return o, err
	}
	if err := req.Limits.Validate(); err != nil {
		return o, err
	}
	def, _, _ := s.Max.Defaults()
	o.Limits = req.Limits.Or(def)
	if err := o.Limits.Within(s.Max.Limits); err != nil {
		return o, err
	}
	eg, err := SessionEgress(s.Egress, s.Metrics, req.Egress, req.Caller, req.FrontEnd)
	if err != nil {
		return o, err
	}
	o.Egress = eg
	return o, nil
}

// SetEnv checks req and changes its session's environment; a refusal is
// audited.
func (s *Sessions) SetEnv(ctx context.Context, req *SessionEnvRequest) error {
	err := s.setEnv(ctx, req)
	if err != nil {
		err = SessionError(err)
		s.refusedEnv(req, err)
	}
	return err
}

func (s *Sessions) setEnv(ctx context.Context, req *SessionEnvRequest) error {
	// A session's variables are shell names: its shell carries them
	// from call to call.
	for _, k := range append(slices.Sorted(maps.Keys(req.Set)), req.Unset...) {
		if err := session.CheckEnvName(k); err != nil {
			return err
		}
	}
	set, err := box.EnvList(req.Set)
	if err != nil {
		return err
	}
	if s.Policy != nil {
		in := policy.Input{Action: policy.ActionSessionEnv, SessionID: req.Session.ID(), Env: req.Set, Unset: req.Unset,
			Caller: req.Caller, FrontEnd: actionFrontEnd}
		if err := decided(ctx, s.Policy, req.RequestID, in); err != nil {
			return err
		}
	}
	return req.Session.SetEnv(set, req.Unset)
}

// actionFrontEnd is the front end of the requests the policy decides as
// actions: the HTTP API's session endpoints (an MCP session's workspace is
// not decided).
const actionFrontEnd = "http"

// decided is the policy's decision on in: nil, or the denial.
func decided(ctx context.Context, p *policy.Engine, requestID string, in policy.Input) error {
	d := p.Decide(ctx, requestID, in)
	if d.Allow {
		return nil
	}
	return Refusal(ctx, &d)
}

// refusedSession writes the record of a session creation refused.
func (s *Sessions) refusedSession(req *SessionRequest, err error) {
	if s.Audit == nil || errors.Is(err, context.Canceled) {
		return
	}
	rec := s.Audit.actionRecord(policy.ActionSessionCreate, req.Caller, req.RequestID, err)
	rec.Cwd = req.Cwd
	rec.EnvKeys = envKeys(req.Env)
	l := req.Limits
	rec.Limits = api.AuditLimits{MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs, TmpfsSizeBytes: l.TmpfsSize}
	s.Audit.write(rec)
}

// refusedEnv writes the record of a change of a session's environment
// refused.
func (s *Sessions) refusedEnv(req *SessionEnvRequest, err error) {
	if s.Audit == nil || errors.Is(err, context.Canceled) {
		return
	}
	rec := s.Audit.actionRecord(policy.ActionSessionEnv, req.Caller, req.RequestID, err)
	rec.SessionID = req.Session.ID()
	rec.EnvKeys = append(envKeys(req.Set), req.Unset...)
	s.Audit.write(rec)
}

// actionRecord is the record of a refused request that is not a run:
// action names it (a policy action), the verdict is the error's.
func (l *AuditLog) actionRecord(action, caller, requestID string, err error) *api.AuditRecord {
	return &api.AuditRecord{
		Time:      l.o.Now(),
		Action:    action,
		RequestID: requestID,
		Caller:    caller,
		Verdict:   api.RunOutcome(nil, err).Verdict,
		Error:     err.Error(),
	}
}

// envKeys are env's names, sorted.
func envKeys(env map[string]string) []string {
	return slices.Sorted(maps.Keys(env))
}
