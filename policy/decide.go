package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
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
	Message string
	// Reasons say why a Denied request was denied: the policy's own
	// messages (ReasonsQuery, DenyQuery), and in the ShellEach mode
	// jaild's for what it refuses before asking. Empty otherwise, and when
	// the set gives none.
	Reasons []string
	// DeniedCommand is the simple command of a denied shell string that
	// was refused, as argv (see Command.String): in the ShellEach mode the
	// first the policy denied; in the ShellWhole mode the first the policy
	// denies when the string is that command alone. Empty in argv mode and
	// when no command is refused on its own (a pattern over several, a
	// construct that is not a command).
	DeniedCommand string
	Shadow        bool
	Revision      string
	// Input is what the policy saw.
	Input *Input
	Eval  time.Duration
	// Cached is true when the answer is the set's earlier one to the same
	// input (see decisioncache.go).
	Cached bool
}

// answer is a decision's outcome, as the cache keeps it.
type answer struct {
	result  Result
	message string
	reasons []string
	denied  string
	cached  bool
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
	a := e.decide(ctx, st, &in)
	d.Result, d.Message, d.Reasons, d.DeniedCommand, d.Cached = a.result, a.message, slices.Clone(a.reasons), a.denied, a.cached
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

func (e *Engine) decide(ctx context.Context, st *state, in *Input) answer {
	name := in.Command
	if in.Shell != nil {
		name = in.Shell.Source
	}
	if st.err != nil {
		return answer{result: DenyAll, message: "Policy deny-all is active: " + st.err.Error()}
	}
	if in.Action != "" && in.Action != ActionRun {
		return decideAction(ctx, st.set, in)
	}
	if err := Complete(in, e.opts.Resolver); err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return answer{result: Unparsed, message: err.Error()}
		}
		return answer{result: Unresolved, message: err.Error()}
	}
	if in.Shell != nil && st.shell == ShellEach {
		return st.decideEach(ctx, in)
	}
	a := st.ask(ctx, in, name)
	return a
}

// ask evaluates Query on in (completed), through the set's cache; a deny
// comes with the set's reasons. name is what the messages call the
// request.
func (st *state) ask(ctx context.Context, in *Input, name string) answer {
	v := in.value()
	cache := st.cache
	var h int
	if cache != nil && in.size() <= maxCachedInput {
		h = v.Hash()
		if a, ok := cache.get(v, h); ok {
			a.cached = true
			return a
		}
	} else {
		cache = nil
	}
	rs, err := eval(ctx, st.set.query, v)
	if err != nil {
		return answer{result: EvalError, message: fmt.Sprintf("Policy evaluation failed for '%s': %s", name, unrewrite(err.Error()))}
	}
	a := answer{result: Allowed}
	if !rs.Allowed() { // only a single boolean true allows
		a = answer{result: Denied, message: "Command not allowed: " + name, reasons: st.set.explain(ctx, v)}
		if in.Shell != nil {
			// The cache keeps the whole answer: find the refused command
			// before putting it.
			a.denied = st.refusedAlone(ctx, in)
		}
	}
	if cache != nil {
		cache.put(v, h, a)
	}
	return a
}

// ActionQuery decides the requests that are not runs (Input.Action):
// making a session, changing its environment, the files API. A set that
// leaves it undefined allows them, so that a set written for runs only
// works unchanged. Once defined, only a single true allows; deny-all and
// evaluation errors deny.
const ActionQuery = "data.sandbox.main.allow_action"

// decideAction evaluates ActionQuery on in.
func decideAction(ctx context.Context, s *set, in *Input) answer {
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
	v := in.value()
	rs, err := eval(ctx, s.action, v)
	switch {
	case err != nil:
		return answer{result: EvalError, message: fmt.Sprintf("Policy evaluation failed for '%s': %s", what, unrewrite(err.Error()))}
	case len(rs) == 0: // undefined: the set does not decide actions
		return answer{result: Allowed}
	case !rs.Allowed():
		return answer{result: Denied, message: "Not allowed by policy: " + what, reasons: s.explain(ctx, v)}
	}
	return answer{result: Allowed}
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
	Reasons   []string  `json:"reasons,omitempty"`
	Denied    string    `json:"denied_command,omitempty"`
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
		Reasons: d.Reasons, Denied: d.DeniedCommand,
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

// eval evaluates q on v; ctx's end cancels it. Left to itself, rego
// starts a goroutine per evaluation to watch ctx, and waking it (a thread
// on an idle core) costs a decision more than the rest of its evaluation
// overhead: the cancel is registered on ctx instead (context.AfterFunc
// starts no goroutine for the standard library's contexts), and the
// evaluation's metrics, which nothing reads, are not kept.
func eval(ctx context.Context, q rego.PreparedEvalQuery, v ast.Value) (rego.ResultSet, error) {
	c := topdown.NewCancel()
	if ctx.Err() != nil {
		c.Cancel() // AfterFunc would, but in a goroutine of its own
	}
	stop := context.AfterFunc(ctx, c.Cancel)
	defer stop()
	return q.Eval(ctx, rego.EvalParsedInput(v), rego.EvalExternalCancel(c), rego.EvalMetrics(noMetrics))
}

var noMetrics = metrics.NoOp()
