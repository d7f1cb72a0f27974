package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// Defaults of [MCPOptions].
const (
	// DefaultMCPTimeout is the timeout of a tool call that names none: the
	// default of the agent Bash tools jaild stands in for.
	DefaultMCPTimeout = 120 * time.Second
	// MaxMCPTimeout is the largest timeout a tool call may ask for, the
	// Bash tools' conventional 10 minutes. An operator may lower it, not
	// raise it, so that the schema's documented maximum stays true.
	MaxMCPTimeout = 600 * time.Second
	// DefaultMCPMaxOutput is how many bytes of each stream a tool result
	// keeps: about what an agent's own Bash tool shows a model (30000
	// characters), since everything returned lands in its context window.
	DefaultMCPMaxOutput = 30000
	// DefaultMCPSessionTimeout closes Streamable HTTP sessions that saw no
	// request for this long, so clients that vanish without a DELETE do
	// not leak sessions.
	DefaultMCPSessionTimeout = 30 * time.Minute
)

// Progress streaming. Output is batched rather than sent per write so a
// chatty command costs a notification per interval, not per line; the
// pending bytes are bounded so a slow client never makes memory grow (nor
// slows the command: the tee only appends to the buffer).
const (
	progressInterval   = 100 * time.Millisecond
	maxProgressPending = 256 << 10
	maxProgressMessage = 16 << 10
	// ProgressStreamMetaKey is the _meta key of a progress notification
	// that says which stream ("stdout" or "stderr") its message is from;
	// heartbeats carry none.
	ProgressStreamMetaKey = "jaild/stream"
)

// heartbeatInterval is how long a command may stay silent before a
// progress notification without a message says it still runs; a variable
// so that tests need not wait for it.
var heartbeatInterval = 5 * time.Second

// MCPOptions configures the MCP front end. The zero value is usable: each
// field documents its zero.
type MCPOptions struct {
	// Limits are the resources of every sandbox a tool call runs in; zero
	// fields mean the jail's defaults. Tool calls cannot change them.
	Limits jail.Limits
	// DefaultTimeout applies to calls that give no timeout; zero means
	// DefaultMCPTimeout. It is clamped to MaxTimeout.
	DefaultTimeout time.Duration
	// MaxTimeout is the operator's ceiling: longer requested timeouts are
	// clamped to it. Zero, or anything above MaxMCPTimeout, means
	// MaxMCPTimeout.
	MaxTimeout time.Duration
	// MaxOutput is how many bytes of each of stdout and stderr a result
	// keeps (the middle is elided beyond it); zero means
	// DefaultMCPMaxOutput.
	MaxOutput int64
	// Shell runs the bash tool's command as Shell -c COMMAND inside the
	// sandbox; empty means "/bin/bash".
	Shell string
	// AllowedOrigins are browser origins ("https://app.example.com")
	// accepted by the HTTP handler in addition to loopback ones. Requests
	// without an Origin header (non-browser clients) are always accepted.
	AllowedOrigins []string
	// SessionTimeout closes idle Streamable HTTP sessions; zero means
	// DefaultMCPSessionTimeout, negative means never.
	SessionTimeout time.Duration
	// Version is reported to clients in serverInfo; empty means the
	// module version from the build info.
	Version string
	// Logger receives one line per tool call (never its output) and the
	// SDK's messages; nil discards them.
	Logger *slog.Logger
}

func (o MCPOptions) withDefaults() MCPOptions {
	if o.MaxTimeout <= 0 || o.MaxTimeout > MaxMCPTimeout {
		o.MaxTimeout = MaxMCPTimeout
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultMCPTimeout
	}
	o.DefaultTimeout = min(o.DefaultTimeout, o.MaxTimeout)
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMCPMaxOutput
	}
	if o.Shell == "" {
		o.Shell = "/bin/bash"
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultMCPSessionTimeout
	}
	if o.Version == "" {
		o.Version = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			o.Version = bi.Main.Version
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// BashInput is the argument of the bash tool, shaped like the Bash tool of
// coding agents so that a model that knows one knows the other.
type BashInput struct {
	Command     string            `json:"command" jsonschema:"The shell command line to run, e.g. 'ls -al /work && make test'. It runs with bash -c in a fresh sandbox, so pipes, redirections and && work."`
	Description string            `json:"description,omitempty" jsonschema:"A short description of what the command does, in 5-10 words (for logs and for people watching); it does not change what runs."`
	Timeout     int64             `json:"timeout,omitempty" jsonschema:"Timeout in milliseconds. The sandbox is killed when it expires and the result still carries the output produced so far."`
	Cwd         string            `json:"cwd,omitempty" jsonschema:"Working directory inside the sandbox: /work (the default, empty at the start of every call), /tmp, or a directory below them."`
	Env         map[string]string `json:"env,omitempty" jsonschema:"Extra environment variables, as an object of NAME: value. PATH, HOME=/work, USER and LANG are set already and may be overridden."`
}

// ExecuteInput is the argument of the execute tool: a program and its
// arguments, with no shell in between.
type ExecuteInput struct {
	Command   string   `json:"command" jsonschema:"The program to run, looked up in PATH inside the sandbox (e.g. 'python3') or an absolute path. No shell is involved: do not put arguments, pipes or quotes here."`
	Args      []string `json:"args,omitempty" jsonschema:"Arguments passed to the program as they are, one per element, without shell quoting or expansion."`
	Stdin     string   `json:"stdin,omitempty" jsonschema:"Text fed to the program's standard input; empty means no input (/dev/null)."`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"Timeout in milliseconds. The sandbox is killed when it expires and the result still carries the output produced so far."`
}

// RunOutput is the structured result of both tools: the output and the
// jail's verdict.
type RunOutput struct {
	ExitCode        int    `json:"exit_code" jsonschema:"The command's exit status; -1 if a signal killed it (see signal)."`
	Signal          string `json:"signal,omitempty" jsonschema:"The signal that killed the command (e.g. SIGKILL), if one did."`
	Stdout          string `json:"stdout" jsonschema:"Standard output. Beyond the output limit its middle is replaced by a line '[... jaild: N bytes of output elided ...]'."`
	Stderr          string `json:"stderr" jsonschema:"Standard error, elided like stdout."`
	StdoutBytes     int64  `json:"stdout_bytes" jsonschema:"How many bytes the command wrote to stdout, kept or not."`
	StderrBytes     int64  `json:"stderr_bytes" jsonschema:"How many bytes the command wrote to stderr, kept or not."`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"Whether part of stdout was elided."`
	StderrTruncated bool   `json:"stderr_truncated" jsonschema:"Whether part of stderr was elided."`
	TimedOut        bool   `json:"timed_out" jsonschema:"Whether the timeout expired and the sandbox was killed; the output is partial."`
	OOMKilled       bool   `json:"oom_killed" jsonschema:"Whether a process was killed for exceeding the sandbox's memory limit."`
	PidsLimitHit    bool   `json:"pids_limit_hit" jsonschema:"Whether a fork or thread creation was refused by the sandbox's process limit."`
	TimeoutMS       int64  `json:"timeout_ms" jsonschema:"The timeout that applied, in milliseconds, after the default and the operator's maximum."`
	DurationMS      int64  `json:"duration_ms" jsonschema:"Wall-clock run time in milliseconds."`
	CPUMS           int64  `json:"cpu_ms" jsonschema:"CPU time used by all processes of the sandbox, in milliseconds."`
	MemoryPeakBytes int64  `json:"memory_peak_bytes" jsonschema:"Peak memory use of the sandbox in bytes."`
	ID              string `json:"id" jsonschema:"The sandbox's id, as in jaild's logs."`
}

// NewMCPServer returns an MCP server with the bash and execute tools, each
// call run by r in a fresh sandbox. Serve it with [mcp.Server.Run] over
// stdio, or over HTTP with [NewMCPHandler].
func NewMCPServer(r run.Runner, opts MCPOptions) *mcp.Server {
	return newMCPServer(r, opts.withDefaults(), nil)
}

// postContext finds the context of the HTTP request that carried a tool
// call, if any (see [mcpHandler]).
type postContext func(*mcp.CallToolRequest) (context.Context, bool)

func newMCPServer(r run.Runner, o MCPOptions, post postContext) *mcp.Server {
	t := &mcpTools{run: r, opts: o, log: o.Logger, post: post}
	s := mcp.NewServer(&mcp.Implementation{Name: "jaild", Title: "jaild sandboxed shell", Version: o.Version}, &mcp.ServerOptions{
		Instructions: t.instructions(),
		Logger:       o.Logger,
		// Tools only: no logging capability (the SDK's historical default),
		// since jaild logs on its own side, never into the model's context.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:         "bash",
		Title:        "Run a shell command in a sandbox",
		Description:  t.bashDescription(),
		InputSchema:  t.bashSchema(),
		OutputSchema: outputSchema(),
		Annotations:  toolAnnotations(),
	}, t.bash)
	mcp.AddTool(s, &mcp.Tool{
		Name:         "execute",
		Title:        "Run a program in a sandbox",
		Description:  t.executeDescription(),
		InputSchema:  t.executeSchema(),
		OutputSchema: outputSchema(),
		Annotations:  toolAnnotations(),
	}, t.execute)
	return s
}

func toolAnnotations() *mcp.ToolAnnotations {
	f := false
	// Not destructive or open-world: whatever a command does stays in a
	// sandbox without network that is thrown away after the call.
	return &mcp.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &f}
}

type mcpTools struct {
	run  run.Runner
	opts MCPOptions
	log  *slog.Logger
	post postContext
}

func (t *mcpTools) sandboxText() string {
	l := t.opts.Limits.WithDefaults()
	return fmt.Sprintf("Every call runs in a fresh, throwaway Linux sandbox: no network (loopback only), "+
		"a read-only root filesystem, and empty writable /work (the default working directory and HOME) and /tmp; "+
		"nothing persists between calls, so chain dependent steps in one call (e.g. with &&). "+
		"The command runs as an unprivileged user with %s of memory, %d processes and %g CPUs. "+
		"stdout and stderr are kept up to %d bytes each; beyond that the middle is replaced by a line "+
		"'[... jaild: N bytes of output elided ...]'. A non-zero exit code, a timeout or an out-of-memory kill "+
		"marks the result as an error, with the output still returned. "+
		"Timeout: default %d ms, maximum %d ms (longer requests are reduced to it).",
		humanBytes(l.Memory), l.Pids, l.CPUs, t.opts.MaxOutput,
		t.opts.DefaultTimeout.Milliseconds(), t.opts.MaxTimeout.Milliseconds())
}

func (t *mcpTools) instructions() string {
	return "jaild runs commands in sandboxes. Use `bash` for shell command lines and `execute` to run one program " +
		"with exact arguments and optional stdin. " + t.sandboxText()
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
	return s
}

func (t *mcpTools) executeSchema() *jsonschema.Schema {
	s := mustSchema[ExecuteInput]()
	s.Properties["command"].MinLength = jsonschema.Ptr(1)
	t.timeoutSchema(s.Properties["timeout_ms"])
	return s
}

func (t *mcpTools) timeoutSchema(p *jsonschema.Schema) {
	p.Minimum = jsonschema.Ptr(0.0)
	p.Maximum = jsonschema.Ptr(float64(MaxMCPTimeout.Milliseconds()))
	p.Description += fmt.Sprintf(" Default %d, maximum %d.", t.opts.DefaultTimeout.Milliseconds(), MaxMCPTimeout.Milliseconds())
	if t.opts.MaxTimeout < MaxMCPTimeout {
		p.Description += fmt.Sprintf(" This server reduces larger values to %d.", t.opts.MaxTimeout.Milliseconds())
	}
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
	env := make([]string, 0, len(in.Env))
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, nil, fmt.Errorf("invalid arguments: env name %q must be non-empty without '=' or NUL", k)
		}
		env = append(env, k+"="+in.Env[k])
	}
	cmd := jail.Command{
		Args: []string{t.opts.Shell, "-c", in.Command},
		Env:  env,
		Dir:  in.Cwd,
	}
	return t.call(ctx, req, "bash", in.Description, in.Timeout, cmd)
}

func (t *mcpTools) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, *RunOutput, error) {
	if in.Command == "" {
		return nil, nil, errors.New("invalid arguments: command is empty")
	}
	cmd := jail.Command{Args: append([]string{in.Command}, in.Args...)}
	if in.Stdin != "" {
		cmd.Stdin = strings.NewReader(in.Stdin)
	}
	return t.call(ctx, req, "execute", "", in.TimeoutMS, cmd)
}

// call runs cmd and turns the outcome into a tool result. Errors it returns
// become tool errors (isError with the message) that a model can read; an
// error that only a cancelled call can see is returned as is.
func (t *mcpTools) call(ctx context.Context, req *mcp.CallToolRequest, tool, desc string, timeoutMS int64, cmd jail.Command) (res *mcp.CallToolResult, out *RunOutput, err error) {
	defer func() {
		// A bug in a run must not take down a daemon serving other
		// agents; the caller gets a tool error, the log the stack.
		if p := recover(); p != nil {
			t.log.Error("mcp tool call panicked", "tool", tool, "panic", p, "stack", string(debug.Stack()))
			res, out, err = nil, nil, errors.New("internal error in jaild; see its log")
		}
	}()
	// The SDK validates against the schema; this guards a caller that
	// bypasses it (and documents the contract).
	if timeoutMS < 0 || timeoutMS > MaxMCPTimeout.Milliseconds() {
		return nil, nil, fmt.Errorf("invalid arguments: timeout %d ms: must be between 0 and %d", timeoutMS, MaxMCPTimeout.Milliseconds())
	}
	timeout := t.opts.DefaultTimeout
	if timeoutMS > 0 {
		timeout = min(time.Duration(timeoutMS)*time.Millisecond, t.opts.MaxTimeout)
	}
	cmd.Timeout = timeout
	cmd.MaxOutput = t.opts.MaxOutput

	// runCtx is what the runner sees. Over HTTP it carries the values of
	// the request that brought the call (request id, authenticated
	// caller, for the audit log) rather than those of the request that
	// opened the session, which the SDK's contexts carry. And it ends
	// when that request does: the SDK keeps a call running after its
	// client hung up (it could resume the stream), but jaild has nothing
	// to resume from, so a vanished client kills the sandbox like a
	// cancellation does.
	runCtx := ctx
	if t.post != nil {
		if pctx, ok := t.post(req); ok {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithCancel(context.WithoutCancel(pctx))
			defer cancel()
			defer context.AfterFunc(pctx, cancel)()
			defer context.AfterFunc(ctx, cancel)()
			// Notifications stop too (ctx carries the SDK's routing).
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(runCtx, cancel)()
		}
	}

	if tok := req.Params.GetProgressToken(); tok != nil {
		ps := newProgressStream(ctx, req.Session, tok)
		// The SDK sends the result after this handler returns, so all
		// notifications precede it.
		defer ps.close()
		cmd.Stdout, cmd.Stderr = ps.writer("stdout"), ps.writer("stderr")
	}
	start := time.Now()
	r, err := t.run.Run(run.WithDescription(runCtx, desc), &jail.Spec{Limits: t.opts.Limits, Command: cmd})
	logArgs := []any{"tool", tool, "timeout_ms", timeout.Milliseconds()}
	if id := req.Session.ID(); id != "" {
		logArgs = append(logArgs, "session", id)
	}
	if desc != "" {
		logArgs = append(logArgs, "description", desc)
	}
	switch {
	case runCtx.Err() != nil:
		// Cancelled or disconnected: nobody reads this answer.
		t.log.Info("mcp tool call cancelled", append(logArgs, "after", time.Since(start).Round(time.Millisecond))...)
		return nil, nil, fmt.Errorf("call cancelled: %w", context.Cause(runCtx))
	case err != nil:
		t.log.Info("mcp tool call failed", append(logArgs, "err", err)...)
		return nil, nil, toolError(cmd.Args[0], err)
	case r == nil:
		return nil, nil, errors.New("internal error in jaild: no result")
	}
	out = &RunOutput{
		ExitCode:        r.ExitCode,
		Signal:          r.Signal,
		Stdout:          r.Stdout,
		Stderr:          r.Stderr,
		StdoutBytes:     r.StdoutBytes,
		StderrBytes:     r.StderrBytes,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		TimedOut:        r.TimedOut,
		OOMKilled:       r.OOMKilled,
		PidsLimitHit:    r.PidsLimitHit,
		TimeoutMS:       timeout.Milliseconds(),
		DurationMS:      r.DurationMS,
		CPUMS:           r.CPUMS,
		MemoryPeakBytes: r.MemoryPeak,
		ID:              r.ID,
	}
	t.log.Info("mcp tool call", append(logArgs, "id", r.ID, "exit_code", r.ExitCode, "timed_out", r.TimedOut,
		"oom_killed", r.OOMKilled, "pids_limit_hit", r.PidsLimitHit, "duration_ms", r.DurationMS)...)
	res = &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: renderText(out, t.opts.Limits.WithDefaults(), timeoutMS > timeout.Milliseconds())}},
		// The output stays in the result either way; isError tells the
		// model that the command did not succeed.
		IsError: r.ExitCode != 0 || r.TimedOut || r.OOMKilled,
	}
	return res, out, nil
}

// toolError words a run error for a model.
func toolError(prog string, err error) error {
	switch {
	case jail.IsInvalid(err):
		return fmt.Errorf("invalid arguments: %w", err)
	case errors.Is(err, jail.ErrNotFound):
		return fmt.Errorf("command not found in the sandbox: %s", prog)
	case errors.Is(err, jail.ErrNotExecutable):
		return fmt.Errorf("command not executable in the sandbox: %s", prog)
	default:
		return fmt.Errorf("jaild could not run the command: %w", err)
	}
}

// renderText is the result as a model reads it: a verdict line, then the
// output streams.
func renderText(o *RunOutput, l jail.Limits, clamped bool) string {
	var b strings.Builder
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "TIMED OUT after %d ms: the sandbox was killed; the output below is partial.\n", o.TimeoutMS)
	case o.Signal != "":
		fmt.Fprintf(&b, "killed by %s", o.Signal)
	default:
		fmt.Fprintf(&b, "exit code %d", o.ExitCode)
	}
	if !o.TimedOut {
		fmt.Fprintf(&b, " (%d ms, cpu %d ms, peak memory %s)\n", o.DurationMS, o.CPUMS, humanBytes(o.MemoryPeakBytes))
	}
	if clamped {
		fmt.Fprintf(&b, "Note: the requested timeout was reduced to this server's maximum of %d ms.\n", o.TimeoutMS)
	}
	if o.OOMKilled {
		fmt.Fprintf(&b, "OUT OF MEMORY: a process was killed at the sandbox's memory limit of %s.\n", humanBytes(l.Memory))
	}
	if o.PidsLimitHit {
		fmt.Fprintf(&b, "PROCESS LIMIT HIT: a fork or thread was refused at the sandbox's limit of %d processes.\n", l.Pids)
	}
	for _, s := range []struct {
		name      string
		text      string
		n         int64
		truncated bool
	}{{"stdout", o.Stdout, o.StdoutBytes, o.StdoutTruncated}, {"stderr", o.Stderr, o.StderrBytes, o.StderrTruncated}} {
		if s.text == "" {
			continue
		}
		if s.truncated {
			fmt.Fprintf(&b, "--- %s (%d bytes, middle elided) ---\n", s.name, s.n)
		} else {
			fmt.Fprintf(&b, "--- %s ---\n", s.name)
		}
		b.WriteString(s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteByte('\n')
		}
	}
	if o.Stdout == "" && o.Stderr == "" {
		b.WriteString("(no output)\n")
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20:
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64), ".0") + " MiB"
	case n >= 1<<10:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	default:
		return strconv.FormatInt(n, 10) + " B"
	}
}

// progressStream sends a command's output as progress notifications while
// it runs. Writers only append to a bounded buffer; one goroutine, joined
// by close, sends what accumulated every progressInterval, and a heartbeat
// when there was nothing to send for heartbeatInterval so that clients
// that reset their request timeout on progress keep waiting.
type progressStream struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	start   time.Time
	beat    time.Duration

	mu      sync.Mutex
	pending []chunk
	size    int
	dropped map[string]int64
	carry   map[string][]byte // an incomplete UTF-8 sequence at the end of a write

	last float64 // last progress value sent; only the sender goroutine uses it
	done chan struct{}
	wg   sync.WaitGroup
}

type chunk struct {
	stream string
	data   []byte
}

func newProgressStream(ctx context.Context, ss *mcp.ServerSession, token any) *progressStream {
	p := &progressStream{
		ctx: ctx, session: ss, token: token, start: time.Now(), beat: heartbeatInterval,
		dropped: map[string]int64{}, carry: map[string][]byte{},
		done: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

type streamWriter struct {
	p      *progressStream
	stream string
}

func (p *progressStream) writer(stream string) *streamWriter { return &streamWriter{p, stream} }

// Write never blocks on the client and never fails, so it cannot slow the
// command down or end the jail's tee.
func (w *streamWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	data := append(p.carry[w.stream], b...)
	cut := completeUTF8(data)
	p.carry[w.stream] = append([]byte(nil), data[cut:]...)
	p.add(w.stream, data[:cut])
	return len(b), nil
}

// add queues data for stream; p.mu is held.
func (p *progressStream) add(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	if room := maxProgressPending - p.size; len(data) > room {
		p.dropped[stream] += int64(len(data) - max(room, 0))
		data = data[:max(room, 0)]
		if len(data) == 0 {
			return
		}
	}
	p.size += len(data)
	if n := len(p.pending); n > 0 && p.pending[n-1].stream == stream {
		p.pending[n-1].data = append(p.pending[n-1].data, data...)
		return
	}
	p.pending = append(p.pending, chunk{stream, append([]byte(nil), data...)})
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end inside a UTF-8 sequence, so a character split across two reads from
// the pipe is not sent as two invalid halves.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}

func (p *progressStream) take(final bool) []chunk {
	p.mu.Lock()
	defer p.mu.Unlock()
	if final {
		for _, s := range []string{"stdout", "stderr"} {
			p.add(s, p.carry[s])
			p.carry[s] = nil
		}
	}
	for _, s := range []string{"stdout", "stderr"} {
		if n := p.dropped[s]; n > 0 {
			p.pending = append(p.pending, chunk{s, fmt.Appendf(nil, "\n[... jaild: %d bytes of output not streamed (client too slow) ...]\n", n)})
			p.dropped[s] = 0
		}
	}
	c := p.pending
	p.pending, p.size = nil, 0
	return c
}

func (p *progressStream) loop() {
	defer p.wg.Done()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	lastSent := time.Now()
	for {
		select {
		case <-p.done:
			p.send(p.take(true))
			return
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		if c := p.take(false); len(c) > 0 {
			p.send(c)
			lastSent = time.Now()
		} else if time.Since(lastSent) >= p.beat {
			p.notify("", "")
			lastSent = time.Now()
		}
	}
}

func (p *progressStream) send(chunks []chunk) {
	for _, c := range chunks {
		for data := c.data; len(data) > 0; {
			n := len(data)
			if n > maxProgressMessage {
				n = maxProgressMessage
				// Back up to a character boundary (at most 3 bytes).
				for i := n; i > n-utf8.UTFMax && i > 0; i-- {
					if utf8.RuneStart(data[i]) {
						n = i
						break
					}
				}
			}
			p.notify(c.stream, string(data[:n]))
			data = data[n:]
		}
	}
}

func (p *progressStream) notify(stream, msg string) {
	// Progress must increase with every notification: elapsed
	// milliseconds, nudged past the previous value. There is no total:
	// the time a call waits for a sandbox is not bounded by its timeout.
	v := max(float64(time.Since(p.start).Milliseconds()), p.last+1)
	p.last = v
	params := &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: v, Message: msg}
	if stream != "" {
		params.Meta = mcp.Meta{ProgressStreamMetaKey: stream}
	}
	// An error means the client is gone or slow to the point of failing
	// writes; the call's own ctx handles that, and the result carries
	// the output anyway.
	_ = p.session.NotifyProgress(p.ctx, params)
}

// close stops the stream after a final flush and waits for its goroutine.
func (p *progressStream) close() {
	close(p.done)
	p.wg.Wait()
}

// NewMCPHandler serves the MCP server of [NewMCPServer] over Streamable
// HTTP. It adds what the SDK leaves to the application: an Origin check
// against DNS rebinding (see [MCPOptions.AllowedOrigins]), a JSON-RPC error
// for unknown methods, and killing a call's sandbox when the client that
// made it disconnects. Authentication is the caller's: mount it behind the
// same bearer-token check as the rest of the API.
func NewMCPHandler(r run.Runner, opts MCPOptions) http.Handler {
	o := opts.withDefaults()
	h := &mcpHandler{
		origins:    newOriginPolicy(o.AllowedOrigins),
		posts:      map[string]context.Context{},
		maxTimeout: o.MaxTimeout,
	}
	srv := newMCPServer(r, o, h.postContext)
	h.sdk = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:         o.Logger,
		SessionTimeout: max(o.SessionTimeout, 0),
	})
	return h
}

// postIDHeader carries, from mcpHandler to the tool handler, which HTTP
// request a call arrived on: the SDK hands tool handlers the request's
// headers but not its context. Any client-supplied value is removed first.
const postIDHeader = "Jaild-Internal-Post-Id"

type mcpHandler struct {
	sdk        *mcp.StreamableHTTPHandler
	origins    originPolicy
	maxTimeout time.Duration

	mu    sync.Mutex
	posts map[string]context.Context
}

func (h *mcpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); !h.origins.allowed(origin) {
		// A browser page on another site (possibly reaching a loopback
		// port through DNS rebinding) must not drive a root daemon.
		http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
		return
	}
	r.Header.Del(postIDHeader)
	rc := http.NewResponseController(w)
	switch r.Method {
	case http.MethodPost:
		body, status := readMCPBody(rc, r)
		if status != 0 {
			http.Error(w, http.StatusText(status), status)
			return
		}
		// From here on the call may stream for up to the maximum
		// timeout. A read deadline left in place would, through
		// net/http's background read, cancel the request and so kill
		// the sandbox; the write deadline only bounds a client that
		// stops reading.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Now().Add(h.maxTimeout + 2*time.Minute))
		r.Body = io.NopCloser(bytes.NewReader(body))
		id := rand.Text()
		h.mu.Lock()
		h.posts[id] = r.Context()
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			delete(h.posts, id)
			h.mu.Unlock()
		}()
		r.Header.Set(postIDHeader, id)
		if jw := newJSONRPCErrorWriter(w, body); jw != nil {
			w = jw
			defer jw.finish()
		}
	case http.MethodGet:
		// The standalone SSE stream lives as long as the client wants.
		_ = rc.SetWriteDeadline(time.Time{})
		_ = rc.SetReadDeadline(time.Time{})
	}
	h.sdk.ServeHTTP(w, r)
}

// mcpBodyTimeout bounds how long a client may take to send a request body
// (against slow-loris clients).
const mcpBodyTimeout = 30 * time.Second

// readMCPBody reads the request body within mcpBodyTimeout and the SDK's
// size limit, or returns the HTTP status to fail with.
func readMCPBody(rc *http.ResponseController, r *http.Request) ([]byte, int) {
	if r.Body == nil {
		return nil, 0
	}
	_ = rc.SetReadDeadline(time.Now().Add(mcpBodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout
	case err != nil:
		return nil, http.StatusBadRequest
	case len(body) > mcp.DefaultMaxRequestBodyBytes:
		return nil, http.StatusRequestEntityTooLarge
	}
	return body, 0
}

func (h *mcpHandler) postContext(req *mcp.CallToolRequest) (context.Context, bool) {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil, false
	}
	id := req.Extra.Header.Get(postIDHeader)
	if id == "" {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx, ok := h.posts[id]; ok {
		return ctx, true
	}
	// The request ended before its call started, which only a client
	// that hung up makes happen: nobody will read this call's result.
	return endedContext, true
}

// endedContext is an already cancelled context.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// jsonrpcErrorWriter turns the SDK's plain-text "400 Bad Request" for a
// call to an unknown method into a JSON-RPC error response. Clients probe
// servers with methods of newer protocol versions and fall back only on a
// JSON-RPC error; over stdio the SDK already answers that way.
type jsonrpcErrorWriter struct {
	http.ResponseWriter
	id        jsonrpc.ID
	intercept bool
	body      []byte
	wrote     bool
}

// newJSONRPCErrorWriter wraps w if body is a single call (whose errors may
// need rewriting), and returns nil otherwise.
func newJSONRPCErrorWriter(w http.ResponseWriter, body []byte) *jsonrpcErrorWriter {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil
	}
	call, ok := msg.(*jsonrpc.Request)
	if !ok || !call.IsCall() {
		return nil
	}
	return &jsonrpcErrorWriter{ResponseWriter: w, id: call.ID}
}

func (w *jsonrpcErrorWriter) WriteHeader(code int) {
	if !w.wrote && code == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.intercept = true
	} else {
		w.ResponseWriter.WriteHeader(code)
	}
	w.wrote = true
}

func (w *jsonrpcErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.intercept {
		if len(w.body) < 4096 {
			w.body = append(w.body, b[:min(len(b), 4096-len(w.body))]...)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush and Unwrap keep SSE streaming and deadline control working through
// the wrapper.
func (w *jsonrpcErrorWriter) Flush() {
	if !w.intercept {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *jsonrpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sdkNotHandled and sdkInvalidRequest prefix the SDK's messages for a call
// to an unknown method and for a malformed call (jsonrpc2.ErrNotHandled,
// jsonrpc2.ErrInvalidRequest).
const (
	sdkNotHandled     = "JSON RPC not handled"
	sdkInvalidRequest = "invalid request"
)

func (w *jsonrpcErrorWriter) finish() {
	if !w.intercept {
		return
	}
	msg := strings.TrimSpace(string(w.body))
	var code int64
	switch {
	case strings.HasPrefix(msg, sdkNotHandled):
		code = jsonrpc.CodeMethodNotFound
		msg = "Method not found: " + strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(msg, sdkNotHandled), ":"))
	case strings.HasPrefix(msg, sdkInvalidRequest):
		code = jsonrpc.CodeInvalidRequest
	default:
		// A transport-level complaint (headers, session): leave it as
		// the SDK wrote it.
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
		_, _ = w.ResponseWriter.Write(w.body)
		return
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: w.id, Error: &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
		_, _ = w.ResponseWriter.Write(w.body)
		return
	}
	h := w.ResponseWriter.Header()
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.ResponseWriter.WriteHeader(http.StatusOK)
	_, _ = w.ResponseWriter.Write(data)
}
