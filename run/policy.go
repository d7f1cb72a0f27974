package run

import (
	"context"
	"strings"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
)

// Decide returns a Runner that asks the operator's policy about every
// request before passing it on, and refuses what it denies with an
// *api.DeniedError: nothing is built for a denied request. In shadow mode
// the engine allows and only logs what it would deny.
func Decide(r Runner, e *policy.Engine) Runner {
	return &decider{next: r, engine: e}
}

type decider struct {
	next   Runner
	engine *policy.Engine
}

func (d *decider) Run(ctx context.Context, req *Request) (*jail.Result, error) {
	dec := d.engine.Decide(ctx, req.RequestID, policyInput(req))
	if !dec.Allow {
		return nil, &api.DeniedError{Message: dec.Message}
	}
	return d.next.Run(ctx, req)
}

// policyInput is what the policy sees of req: the command as requested and
// jaild's own facts about the request. The engine resolves and hashes the
// executable and parses a shell command line.
func policyInput(req *Request) policy.Input {
	s := req.Spec
	in := policy.Input{
		Env:        map[string]string{},
		Cwd:        s.Dir,
		Caller:     req.Caller,
		FrontEnd:   req.FrontEnd,
		SessionID:  req.SessionID,
		Background: req.Background,
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
