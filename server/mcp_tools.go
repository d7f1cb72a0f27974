package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The bash and execute tools: descriptions, schemas, and the call that runs
// a command through the runner and turns the outcome into a tool result.

func toolAnnotations(egress bool) *mcp.ToolAnnotations {
	f := false
	// Not destructive: whatever a command does stays in a sandbox that
	// is thrown away after the call. Open-world only if a call may ask
	// for network (egress).
	return &mcp.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &egress}
}

type mcpTools struct {
	run  run.Runner
	opts MCPOptions
	log  *slog.Logger
	post postContext
	sess *mcpSessions // nil: one-shot calls
}

// limits are the limits of a tool call's sandbox: the chain's defaults,
// since a call cannot ask for others.
func (t *mcpTools) limits() box.Limits {
	l, _, _ := t.opts.Max.Defaults()
	return l
}

func (t *mcpTools) sandboxText() string {
	l := t.limits()
	def, max := t.opts.Max.ToolTimeouts()
	return fmt.Sprintf("Every call runs in a fresh, throwaway Linux sandbox: no network (loopback only), "+
		"a read-only root filesystem, and "+t.persistence()+
		"The command runs as an unprivileged user with %s of memory, %s and %s. "+
		"stdout and stderr are kept up to %d characters each; beyond that the middle is replaced by a line "+
		"'[... jaild: N bytes of output elided ...]'. A non-zero exit code, a timeout or an out-of-memory kill "+
		"marks the result as an error, with the output still returned. "+
		"Timeout: default %d ms, maximum %d ms (longer requests are reduced to it, and the result says so).",
		humanBytes(l.Memory), plural(float64(l.Pids), "process", "processes"), plural(l.CPUs, "CPU", "CPUs"), t.opts.MaxOutput,
		def.Milliseconds(), max.Milliseconds()) + t.egressText()
}

func (t *mcpTools) egressText() string {
	if !t.opts.Egress {
		return ""
	}
	if t.sess != nil {
		return " The sandbox may reach the destinations the operator allows, through an HTTP proxy " +
			"(HTTP_PROXY/HTTPS_PROXY are set; there is no DNS, and other destinations get HTTP 403)."
	}
	return " With \"egress\": true the sandbox may reach the destinations the operator allows, through an HTTP proxy " +
		"(HTTP_PROXY/HTTPS_PROXY are set; there is no DNS, and other destinations get HTTP 403)."
}

// workDir is the sandboxes' working directory (MCPOptions.WorkDir).
func (t *mcpTools) workDir() string {
	if t.opts.WorkDir == "" {
		return box.DefaultDir
	}
	return t.opts.WorkDir
}

// atWorkDir is a description written for the default working directory
// (box.DefaultDir, /work) as it reads for the operator's: the path is
// what an agent types, so it must be the one that exists.
func (t *mcpTools) atWorkDir(desc string) string {
	if wd := t.workDir(); wd != box.DefaultDir {
		return strings.ReplaceAll(desc, box.DefaultDir, wd)
	}
	return desc
}

// persistence says what outlives a call.
func (t *mcpTools) persistence() string {
	if t.sess == nil {
		return t.atWorkDir("empty writable /work (the default working directory and HOME) and /tmp; " +
			"nothing persists between calls, so chain dependent steps in one call (e.g. with &&). ")
	}
	return t.atWorkDir("writable /work (the default working directory and HOME) and /tmp; " +
		"/work's files, the working directory (cd), exported variables and servers listening on loopback " +
		"persist across the calls of this session, while /tmp and processes are fresh in every call; " +
		"run servers and long jobs with bash's run_in_background. ")
}

func (t *mcpTools) bashDescription() string {
	return "Run a shell command line with bash -c and return its stdout, stderr and exit code. " + t.sandboxText()
}

func (t *mcpTools) executeDescription() string {
	return "Run one program with the given arguments, without a shell, optionally feeding it stdin, and return " +
		"its stdout, stderr and exit code. Prefer it to bash when arguments come from data (no quoting needed). " +
		t.sandboxText()
}

// The schemas are derived from the structs, then given the bounds that
// struct tags cannot express, so that a model sees them and the SDK
// rejects violations before the handler runs.

func (t *mcpTools) bashSchema() *jsonschema.Schema {
	s := mustSchema[BashInput]()
	s.Properties["command"].MinLength = jsonschema.Ptr(1)
	t.timeoutSchema(s.Properties["timeout"])
	s.Properties["env"].PropertyNames = &jsonschema.Schema{Type: "string", Pattern: `^[^=\x00]+$`}
	if t.sess == nil {
		// One-shot calls: no tasks to start.
		delete(s.Properties, "run_in_background")
	} else {
		s.Properties["cwd"].Description = "Working directory of this call only: /work or below (or /tmp). " +
			"Default: the session's directory, where the last cd of a previous call left it."
		s.Properties["env"].Description += " For this call only; variables exported by a previous call are set already."
	}
	for _, p := range []string{"command", "cwd", "env"} {
		s.Properties[p].Description = t.atWorkDir(s.Properties[p].Description)
	}
	t.egressSchema(s)
	return s
}

func (t *mcpTools) executeSchema() *jsonschema.Schema {
	s := mustSchema[ExecuteInput]()
	s.Properties["command"].MinLength = jsonschema.Ptr(1)
	t.timeoutSchema(s.Properties["timeout_ms"])
	t.egressSchema(s)
	return s
}

// egressSchema drops the egress argument unless the operator lets calls
// ask for network, one-shot: with sessions, the session has it or not.
func (t *mcpTools) egressSchema(s *jsonschema.Schema) {
	if !t.opts.Egress || t.sess != nil {
		delete(s.Properties, "egress")
	}
}

// timeoutSchema documents a timeout argument. Larger values than the
// maximum are reduced to it, and the result says so, rather than refused:
// the schema has no maximum, so that a client's validation does not refuse
// them either.
func (t *mcpTools) timeoutSchema(p *jsonschema.Schema) {
	def, max := t.opts.Max.ToolTimeouts()
	p.Minimum = jsonschema.Ptr(0.0)
	p.Description += fmt.Sprintf(" Default (or 0): %d. Maximum %d: larger values are reduced to it, and the result says so.",
		def.Milliseconds(), max.Milliseconds())
}

func outputSchema() *jsonschema.Schema { return mustSchema[RunOutput]() }

func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("server: schema of %T: %v", *new(T), err)) // a bug in a struct above
	}
	return s
}

func (t *mcpTools) bash(ctx context.Context, req *mcp.CallToolRequest, in BashInput) (*mcp.CallToolResult, *RunOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, nil, errors.New("invalid arguments: command is empty")
	}
	env, err := box.EnvList(in.Env)
	if err != nil {
		return nil, nil, t.refuse(ctx, err)
	}
	cmd := box.Command{
		Args: []string{t.opts.Shell, "-c", in.Command},
		Env:  env,
		Dir:  in.Cwd,
	}
	if in.RunInBackground && t.sess == nil {
		return nil, nil, errors.New("invalid arguments: run_in_background needs sessions, which this server does not keep")
	}
	return t.call(ctx, req, "bash", in.Description, in.Command, in.Timeout, in.Egress, cmd, in.RunInBackground)
}

// refuse records a call refused before it became a run, as the HTTP front
// end records its own (the chain records the rest), and returns the tool
// error.
func (t *mcpTools) refuse(ctx context.Context, err error) error {
	t.opts.Audit.Rejected(t.callerName(ctx), requestIDFromContext(ctx), run.RejectInvalid, 0, err.Error())
	return toolError("", err)
}

// callerName names the caller of a request with ctx for the audit log and
// the policy: its authenticated caller, or else MCPOptions.Caller.
func (t *mcpTools) callerName(ctx context.Context) string {
	if id := CallerFromContext(ctx); !id.IsZero() {
		return id.String()
	}
	return t.opts.Caller
}

func (t *mcpTools) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, *RunOutput, error) {
	if in.Command == "" {
		return nil, nil, errors.New("invalid arguments: command is empty")
	}
	cmd := box.Command{Args: append([]string{in.Command}, in.Args...)}
	if in.Stdin != "" {
		cmd.Stdin = strings.NewReader(in.Stdin)
	}
	return t.call(ctx, req, "execute", "", "", in.TimeoutMS, in.Egress, cmd, false)
}

// call runs cmd and turns the outcome into a tool result. Errors it returns
// become tool errors (isError with the message) that a model can read; an
// error that only a cancelled call can see is returned as is.
func (t *mcpTools) call(ctx context.Context, req *mcp.CallToolRequest, tool, desc, shell string, timeoutMS int64, egress bool, cmd box.Command, background bool) (res *mcp.CallToolResult, out *RunOutput, err error) {
	defer func() {
		// A bug in a run must not take down a daemon serving other
		// agents; the caller gets a tool error, the log the stack.
		if p := recover(); p != nil {
			t.log.Error("mcp tool call panicked", "tool", tool, "panic", p, "stack", string(debug.Stack()))
			res, out, err = nil, nil, errors.New("internal error in jaild; see its log")
		}
	}()
	t.setOutput(&cmd, tool)
	wantEgress, err := t.egressOf(egress)
	if err != nil {
		return nil, nil, err
	}
	runCtx, ctx, cancel := t.runContext(ctx, req)
	defer cancel()
	if tok := req.Params.GetProgressToken(); tok != nil {
		ps := newProgressStream(ctx, req.Session, tok, t.opts.Heartbeat)
		// The SDK sends the result after this handler returns, so all
		// notifications precede it.
		defer ps.close()
		cmd.Stdout, cmd.Stderr = ps.writer("stdout"), ps.writer("stderr")
	}
	start := time.Now()
	rreq := run.Request{
		Spec:        &jail.Spec{Command: cmd},
		Caller:      t.callerName(runCtx),
		RequestID:   requestIDFromContext(runCtx),
		FrontEnd:    "mcp:" + tool,
		Shell:       shell,
		Description: desc,
		Egress:      wantEgress,
		Tool:        true,
	}
	rreq.SetTimeout(timeoutField(tool), timeoutMS, time.Millisecond)
	if rreq.SessionID, rreq.Owner, err = t.session(runCtx, req); err != nil {
		return nil, nil, err
	}
	r, jobID, timeout, err := t.runOrStart(runCtx, rreq, background)
	if t.sess != nil && errors.Is(err, box.ErrNotFound) && runCtx.Err() == nil {
		// Removed since get (expired, evicted, lost): said as get says
		// it, not as a command that was not found.
		return nil, nil, t.sess.lostUnder(req.Session, rreq.SessionID, err)
	}
	if err == nil && jobID != "" {
		out = &RunOutput{TaskID: jobID, TimeoutMS: timeout.Milliseconds()}
		t.log.Info("mcp background task started", "tool", tool, "task", jobID, "session", rreq.SessionID)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: backgroundText(jobID)}}}, out, nil
	}
	logArgs := []any{"tool", tool, "timeout_ms", timeout.Milliseconds()}
	if id := req.Session.ID(); id != "" {
		logArgs = append(logArgs, "session", id)
	}
	if desc != "" {
		logArgs = append(logArgs, "description", desc)
	}
	return t.answer(runCtx, r, err, cmd.Args[0], timeout, timeoutMS, start, logArgs)
}

// answer turns a run's outcome into the tool's result, and logs it with
// logArgs: a cancelled call's error, the run's error as a tool error, or
// the result, which says when the chain reduced the timeout the call asked
// for (timeoutMS) to its maximum (timeout).
func (t *mcpTools) answer(runCtx context.Context, r *box.Result, err error, name string, timeout time.Duration, timeoutMS int64, start time.Time, logArgs []any) (*mcp.CallToolResult, *RunOutput, error) {
	switch {
	case runCtx.Err() != nil:
		// Cancelled or disconnected: nobody reads this answer.
		t.log.Info("mcp tool call cancelled", append(logArgs, "after", time.Since(start).Round(time.Millisecond))...)
		return nil, nil, fmt.Errorf("call cancelled: %w", context.Cause(runCtx))
	case err != nil:
		t.log.Info("mcp tool call failed", append(logArgs, "err", err)...)
		return nil, nil, toolError(name, err)
	case r == nil:
		return nil, nil, errors.New("internal error in jaild: no result")
	}
	t.log.Info("mcp tool call", append(logArgs, "id", r.ID, "exit_code", r.ExitCode, "timed_out", r.TimedOut,
		"oom_killed", r.OOMKilled, "pids_limit_hit", r.PidsLimitHit, "duration_ms", r.Duration.Milliseconds())...)
	// The call asked for more than the maximum, to which the chain
	// reduced it.
	res, out := t.result(r, timeout, timeout > 0 && timeoutMS > timeout.Milliseconds())
	return res, out, nil
}

// session is the jaild session a tool call of req runs in, and its owner:
// none without sessions (one-shot calls).
func (t *mcpTools) session(ctx context.Context, req *mcp.CallToolRequest) (string, caller.ID, error) {
	if t.sess == nil {
		return "", caller.ID{}, nil
	}
	id, owner, err := t.sess.get(ctx, req.Session, CallerFromContext(ctx))
	if err != nil {
		if gone := (*goneError)(nil); errors.As(err, &gone) {
			return "", caller.ID{}, err
		}
		return "", caller.ID{}, fmt.Errorf("jaild session: %w", err)
	}
	return id, owner, nil
}

// runOrStart runs rreq, or starts it as a background job, and returns the
// timeout the chain gave it: the default, or the call's reduced to the
// maximum (a background job's: the sessions' job timeout).
func (t *mcpTools) runOrStart(ctx context.Context, rreq run.Request, background bool) (r *box.Result, jobID string, timeout time.Duration, err error) {
	var job time.Duration
	if background {
		jobID, err = t.run.Start(ctx, rreq)
		if t.sess != nil {
			job = t.sess.m.MaxJobTimeout()
		}
	} else {
		r, err = t.run.Run(ctx, rreq)
	}
	return r, jobID, t.opts.Max.ToolCallTimeout(rreq.Spec.Timeout, job), err
}

// egressOf is the egress a tool call's egress argument asks for: nil for
// none, or for nothing more than its session has.
func (t *mcpTools) egressOf(egress bool) (*api.Egress, error) {
	switch {
	case !egress:
		return nil, nil
	case !t.opts.Egress:
		return nil, errors.New("invalid arguments: egress: this server does not let tool calls ask for network")
	case t.sess != nil:
		return nil, nil // the session has egress already
	}
	return &api.Egress{Allowed: true}, nil
}

// setOutput sets how much of each stream cmd's sandbox keeps: what the
// tool's result shows (MCPOptions.MaxOutput's characters, or
// run_network_tool's bytes), within the chain's maxima (withDefaults).
func (t *mcpTools) setOutput(cmd *box.Command, tool string) {
	cmd.MaxOutput = MCPCaptureBytes(t.opts.MaxOutput)
	if tool == ToolRunNetworkTool {
		cmd.MaxOutput = t.opts.MaxOutput // its cap counts bytes
	}
}

// timeoutField names a tool's timeout argument.
func timeoutField(tool string) string {
	if tool == ToolBash {
		return "timeout"
	}
	return "timeout_ms"
}

// runContext returns the context the runner sees and the one progress
// notifications go out on. Over HTTP the first carries the values of the
// request that brought the call (request id, authenticated caller, for
// the audit log) rather than those of the request that opened the
// session, which the SDK's contexts carry. And it ends when that request
// does: the SDK keeps a call running after its client hung up (it could
// resume the stream), but jaild has nothing to resume from, so a vanished
// client kills the sandbox like a cancellation does. cancel releases both.
func (t *mcpTools) runContext(ctx context.Context, req *mcp.CallToolRequest) (runCtx, notifyCtx context.Context, cancel func()) {
	if t.post == nil {
		return ctx, ctx, func() {}
	}
	pctx, ok := t.post(req)
	if !ok {
		return ctx, ctx, func() {}
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(pctx))
	stopP := context.AfterFunc(pctx, cancelRun)
	stopC := context.AfterFunc(ctx, cancelRun)
	// Notifications stop too (ctx carries the SDK's routing).
	notifyCtx, cancelNotify := context.WithCancel(ctx)
	stopN := context.AfterFunc(runCtx, cancelNotify)
	return runCtx, notifyCtx, func() {
		stopN()
		cancelNotify()
		stopC()
		stopP()
		cancelRun()
	}
}

// result is the tool result of a finished run; clamped says the call asked
// for more than the maximum timeout.
func (t *mcpTools) result(r *box.Result, timeout time.Duration, clamped bool) (*mcp.CallToolResult, *RunOutput) {
	out := &RunOutput{
		ExitCode:  r.ExitCode,
		TimeoutMS: timeout.Milliseconds(),
		Verdict:   api.VerdictOf(r),
	}
	var cut [2]bool
	out.Stdout, cut[0] = capChars(r.Stdout, t.opts.MaxOutput, r.StdoutBytes)
	out.Stderr, cut[1] = capChars(r.Stderr, t.opts.MaxOutput, r.StderrBytes)
	out.StdoutTruncated = out.StdoutTruncated || cut[0]
	out.StderrTruncated = out.StderrTruncated || cut[1]
	limits := r.Limits // what the jail applied
	if limits == (box.Limits{}) {
		limits = t.limits()
	}
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: renderText(out, limits, clamped)}},
		// The output stays in the result either way; isError tells the
		// model that the command did not succeed.
		IsError: r.ExitCode != 0 || r.TimedOut || r.OOMKilled,
	}, out
}

// toolError words a run error for a model.
func toolError(prog string, err error) error {
	switch api.ErrorOutcome(err).Code {
	case api.CodeInvalid:
		return fmt.Errorf("invalid arguments: %w", err)
	case api.CodeCommandNotFound:
		return fmt.Errorf("command not found in the sandbox: %s", prog)
	case api.CodeNotExecutable:
		return fmt.Errorf("command not executable in the sandbox: %s", prog)
	case api.CodePolicyDenied:
		return err // the policy's own words
	default:
		return fmt.Errorf("jaild could not run the command: %w", err)
	}
}
