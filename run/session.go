package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/session"
)

// sessionSpec prepares the spec s of a request that names a session, or of
// a background start (which must), before the maxima apply: the session
// must be the caller's; the limits the request leaves unset are the
// session's; a background job's timeout defaults to, and may reach, the
// sessions' maximum job timeout rather than the maximum timeout of a call
// (max is changed to say so).
func sessionSpec(m *session.Manager, req Request, background bool, s *jail.Spec, max *Maxima) error {
	if req.SessionID == "" && !background {
		return nil
	}
	switch {
	case m == nil:
		return &box.InvalidError{Field: "session_id", Reason: "sessions are not served by this daemon"}
	case req.SessionID == "":
		return &box.InvalidError{Field: "run_in_background", Reason: "a background job runs in a session: set session_id"}
	}
	sess, err := m.Get(req.Owner, req.SessionID)
	if err != nil {
		return SessionError(err)
	}
	s.Limits = s.Limits.Or(sess.Limits())
	if background {
		if s.Timeout == 0 {
			s.Timeout = m.MaxJobTimeout()
		}
		max.Timeout = m.MaxJobTimeout()
	}
	return nil
}

// runInSession runs req in its session and waits for its result. With a
// policy, the session asks it about the call as it will run it.
func runInSession(ctx context.Context, m *session.Manager, pol *policy.Engine, req Request) (*box.Result, error) {
	sess, call, err := sessionCall(m, pol, req, false)
	if err != nil {
		return nil, err
	}
	res, err := sess.Run(ctx, call)
	return res, SessionError(err)
}

// startInSession starts req as a background job of its session and
// returns the job's id. The job holds the start's output memory until it
// is forgotten (see Admitter.Start); if it does not start, the memory goes
// back to the start, for its retry (admission's, when the jail was down)
// or to be let go when Start returns.
func startInSession(ctx context.Context, m *session.Manager, pol *policy.Engine, req Request) (string, error) {
	sess, call, err := sessionCall(m, pol, req, true)
	if err != nil {
		return "", err
	}
	call.ReleaseOutput = req.jobOutput.take()
	id, err := sess.Start(ctx, call)
	if err != nil {
		req.jobOutput.putBack(call.ReleaseOutput)
		return "", SessionError(err)
	}
	return id, nil
}

// sessionCall finds req's session and builds the call that runs req.Spec
// there, decided by pol (if not nil) as the session will run it.
func sessionCall(m *session.Manager, pol *policy.Engine, req Request, background bool) (*session.Session, *session.Call, error) {
	if m == nil || req.SessionID == "" {
		return nil, nil, &box.InvalidError{Field: "session_id", Reason: "sessions are not served by this daemon"}
	}
	sess, err := m.Get(req.Owner, req.SessionID)
	if err != nil {
		return nil, nil, SessionError(err)
	}
	spec := req.Spec
	call := &session.Call{Command: spec.Command, Limits: spec.Limits, Check: sessionCheck(pol, req, background), Description: req.Description}
	if req.Shell != "" {
		call.Shell, call.ShellPath, call.Args = req.Shell, shellOf(spec.Args, req.Shell), nil
	}
	return sess, call, nil
}

// shellOf returns the shell of a shell-mode argv (SHELL -c COMMAND), which
// runs the command in a session too: the session does not change the shell
// a front end runs a command in (/bin/sh for /run, --shell-path for the MCP
// bash tool). Empty (session.DefaultShell) for any other argv.
func shellOf(args []string, command string) string {
	if len(args) == 3 && args[1] == "-c" && args[2] == command {
		return args[0]
	}
	return ""
}

// SessionError marks an error of package session with the api error a
// front end answers it with: no such session (404) or a limit (409).
func SessionError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNotFound):
		return box.Mark(err, box.ErrNotFound)
	case errors.Is(err, session.ErrLimit):
		return box.Mark(err, box.ErrLimit)
	case errors.Is(err, session.ErrDraining):
		return box.Mark(err, box.ErrUnavailable)
	case errors.Is(err, session.ErrClosed):
		return box.Mark(fmt.Errorf("%w (the session is gone)", err), box.ErrNotFound)
	}
	return err
}

// observeSessions adds the sessions' gauges to m.
func (m *Metrics) observeSessions(s *session.Manager) {
	if m == nil || s == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "sessions",
			Help: "Sessions (workspaces kept across calls).",
		}, func() float64 { n, _ := s.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "jobs_running",
			Help: "Background jobs running in sessions (they hold no admission slot).",
		}, func() float64 { _, n := s.Stats(); return float64(n) }),
	)
}
