package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
)

// Result is what the policy made of a request.
type Result string

const (
	Allowed Result = "allow"
	// Denied: the policy's answer was not true.
	Denied Result = "deny"
	// DenyAll: no valid policy set is loaded.
	DenyAll Result = "deny_all"
	// EvalError: the query failed.
	EvalError Result = "eval_error"
	// Unresolved: the command is no executable file in the sandbox.
	Unresolved Result = "resolve_error"
	// Unparsed: the shell string does not parse.
	Unparsed Result = "parse_error"
)

// Decision is the engine's answer to one request.
type Decision struct {
	// Allow says whether to run the request: the policy's answer when
	// enforcing, always true in shadow mode.
	Allow bool
	// Result is the policy's own answer, in shadow mode too, where
	// anything but Allowed is a deny it would have made.
	Result Result
	// Message is the denial for the caller, in the policy-runner
	// convention's words; empty when Result is Allowed.
	Message  string
	Shadow   bool
	Revision string
	// Input is what the policy saw.
	Input *Input
	Eval  time.Duration
	// Cached is true when the answer is the set's earlier one to the same
	// input (see decisioncache.go).
	Cached bool
}

// Decide completes in (see Complete) and evaluates the policy on it. id is
// the request's id, for the decision log. It never fails: every error is
// a deny, with a message that says which.
func (e *Engine) Decide(ctx context.Context, id string, in Input) Decision {
	start := time.Now()
	st := e.cur.Load()
	d := Decision{Input: &in, Shadow: e.opts.Mode == Shadow}
	if st.set != nil {
		d.Revision = st.set.revision
	}
	d.Result, d.Message, d.Cached = e.decide(ctx, st, &in)
	d.Eval = time.Since(start)
	d.Allow = d.Result == Allowed || d.Shadow
	if e.opts.Observer != nil {
		e.opts.Observer.Decided(d.Result, d.Shadow, d.Eval)
	}
	if e.dlog != nil {
		e.dlog.write(id, &d)
	}
	return d
}

func (e *Engine) decide(ctx context.Context, st *state, in *Input) (Result, string, bool) {
	name := in.Command
	if in.Shell != nil {
		name = in.Shell.Source
	}
	if st.err != nil {
		return DenyAll, "Policy deny-all is active: " + st.err.Error(), false
	}
	if in.Action != "" && in.Action != ActionRun {
		r, msg := decideAction(ctx, st.set, in)
		return r, msg, false
	}
	if err := Complete(in, e.opts.Resolver); err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return Unparsed, err.Error(), false
		}
		return Unresolved, err.Error(), false
	}
	v := in.value()
	cache := st.cache
	var h int
	if cache != nil && in.size() <= maxCachedInput {
		h = v.Hash()
		if r, msg, ok := cache.get(v, h); ok {
			return r, msg, true
		}
	} else {
		cache = nil
	}
	rs, err := st.set.query.Eval(ctx, rego.EvalParsedInput(v))
	if err != nil {
		return EvalError, fmt.Sprintf("Policy evaluation failed for '%s': %s", name, unrewrite(err.Error())), false
	}
	r, msg := Allowed, ""
	if !rs.Allowed() { // only a single boolean true allows
		r, msg = Denied, "Command not allowed: "+name
	}
	if cache != nil {
		cache.put(v, h, r, msg)
	}
	return r, msg, false
}

// ActionQuery decides the requests that are not runs (Input.Action):
// making a session, changing its environment, the files API. A set that
// leaves it undefined allows them, as before sets could decide them: a set
// written for runs only keeps working. Once defined, only a single true
// allows; deny-all and evaluation errors deny.
const ActionQuery = "data.sandbox.main.allow_action"

// decideAction evaluates ActionQuery on in.
func decideAction(ctx context.Context, s *set, in *Input) (Result, string) {
	if in.Args == nil {
		in.Args = []string{}
	}
	if in.Env == nil {
		in.Env = map[string]string{}
	}
	what := in.Action
	if in.File != "" {
		what += " " + in.File
	}
	rs, err := s.action.Eval(ctx, rego.EvalParsedInput(in.value()))
	switch {
	case err != nil:
		return EvalError, fmt.Sprintf("Policy evaluation failed for '%s': %s", what, unrewrite(err.Error()))
	case len(rs) == 0: // undefined: the set does not decide actions
		return Allowed, ""
	case !rs.Allowed():
		return Denied, "Not allowed by policy: " + what
	}
	return Allowed, ""
}

// decisionLog writes one JSON line per decision. Lines are written whole
// under a lock, so concurrent requests never interleave.
type decisionLog struct {
	mu  sync.Mutex
	w   io.Writer
	env bool
}

type logLine struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id,omitempty"`
	Caller    string    `json:"caller,omitempty"`
	Input     *Input    `json:"input"`
	Result    Result    `json:"result"`
	Allow     bool      `json:"allow"`
	Shadow    bool      `json:"shadow,omitempty"`
	Message   string    `json:"message,omitempty"`
	Revision  string    `json:"revision,omitempty"`
	EvalUS    float64   `json:"eval_us"`
	Cached    bool      `json:"cached,omitempty"`
}

// Redacted replaces env values in the decision log without LogEnv.
const Redacted = "<redacted>"

func (l *decisionLog) write(id string, d *Decision) {
	in := *d.Input
	if !l.env && len(in.Env) > 0 {
		env := make(map[string]string, len(in.Env))
		for k := range in.Env {
			env[k] = Redacted
		}
		in.Env = env
	}
	line, err := json.Marshal(logLine{
		Time: time.Now().UTC(), RequestID: id, Caller: in.Caller, Input: &in,
		Result: d.Result, Allow: d.Allow, Shadow: d.Shadow, Message: d.Message,
		Revision: d.Revision, EvalUS: float64(d.Eval.Nanoseconds()) / 1e3, Cached: d.Cached,
	})
	if err != nil {
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(line)
}
