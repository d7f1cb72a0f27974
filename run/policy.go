package run

import (
	"context"
	"strings"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
)

// withPolicy returns a Runner that asks the operator's policy about every
// request before passing it on, and refuses what it denies with an
// *api.DeniedError: nothing is built for a denied request. In shadow mode
// the engine allows and only logs what it would deny.
//
// A request in a session, and so every background start, is passed on
// undecided: what it runs depends on the session's environment, directory
// and workspace, which only the session knows when it builds the call, so
// the chain's end decides it there (sessionCheck), on the spec that runs.
func withPolicy(r Runner, e *policy.Engine) Runner {
	return &decider{next: r, engine: e}
}

type decider struct {
	next   Runner
	engine *policy.Engine
}

func (d *decider) Run(ctx context.Context, req Request) (*box.Result, error) {
	if req.SessionID == "" {
		dec := d.engine.Decide(ctx, req.RequestID, policyInput(req, false, req.Spec, ""))
		if !dec.Allow {
			return nil, Refusal(ctx, &dec)
		}
	}
	return d.next.Run(ctx, req)
}

// Start passes every start on: a background job runs in a session.
func (d *decider) Start(ctx context.Context, req Request) (string, error) {
	return d.next.Start(ctx, req)
}

// sessionCheck is a session call's session.Call.Check: the policy's
// decision on req (a background start if background) as the session will
// run it (spec: the session's environment and directory merged in;
// workspace: its /work), or nil without a policy.
func sessionCheck(e *policy.Engine, req Request, background bool) func(context.Context, *jail.Spec, string) error {
	if e == nil {
		return nil
	}
	return func(ctx context.Context, spec *jail.Spec, workspace string) error {
		dec := e.Decide(ctx, req.RequestID, policyInput(req, background, spec, workspace))
		if !dec.Allow {
			return Refusal(ctx, &dec)
		}
		return nil
	}
}

// Refusal is the error of a decision d that did not allow a request whose
// context is ctx: the denial, with what the policy said of it, or ctx's
// error if the request ended meanwhile. An evaluation cut short by its
// caller's end decided nothing, and a request its caller gave up is
// canceled, not denied, in its answer, metrics and audit record.
func Refusal(ctx context.Context, d *policy.Decision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return &api.DeniedError{Message: d.Message, Reasons: d.Reasons, DeniedCommand: d.DeniedCommand}
}

// policyInput is what the policy sees of req run (or started in the
// background) as s (req.Spec, or a session's spec of it) on the workspace
// (empty: a fresh /work): the command, environment and directory that run
// and jaild's own facts about the request. The engine resolves and hashes
// the executable in that view and parses a shell command line.
func policyInput(req Request, background bool, s *jail.Spec, workspace string) policy.Input {
	in := policy.Input{
		Action:     policy.ActionRun,
		Workspace:  workspace,
		Env:        map[string]string{},
		Cwd:        s.Dir,
		Caller:     req.Caller,
		FrontEnd:   req.FrontEnd,
		SessionID:  req.SessionID,
		Background: background,
		Limits: map[string]any{
			"memory_bytes":     s.Limits.Memory,
			"pids":             s.Limits.Pids,
			"cpus":             s.Limits.CPUs,
			"tmpfs_size_bytes": s.Limits.TmpfsSize,
			"timeout_ms":       s.Timeout.Milliseconds(),
			"max_output_bytes": s.MaxOutput,
		},
	}
	if len(s.Args) > 0 {
		in.Command, in.Args = s.Args[0], s.Args[1:]
	}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		in.Env[k] = v
	}
	if req.Shell != "" {
		in.Shell = &policy.Shell{Source: req.Shell}
	}
	return in
}
