package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/run"
)

// Defaults of [MCPOptions].
const (
	// DefaultMCPTimeout is the timeout of a tool call that names none,
	// unless the chain's maxima say otherwise: the default of the agent
	// Bash tools jaild stands in for (run.DefaultToolTimeout).
	DefaultMCPTimeout = run.DefaultToolTimeout
	// MaxMCPTimeout is the largest timeout a tool call may ask for, the
	// Bash tools' conventional 10 minutes (run.MaxToolTimeout). An
	// operator may lower it, not raise it, so that the schema's documented
	// maximum stays true.
	MaxMCPTimeout = run.MaxToolTimeout
	// DefaultMCPMaxOutput is how many characters of each stream a tool
	// result keeps: what an agent's own Bash tool shows a model, since
	// everything returned lands in its context window.
	DefaultMCPMaxOutput = 30000
	// DefaultMCPSessionTimeout closes Streamable HTTP sessions that saw no
	// request for this long, so clients that vanish without a DELETE do
	// not leak sessions.
	DefaultMCPSessionTimeout = 30 * time.Minute
	// DefaultMCPHeartbeat is MCPOptions.Heartbeat's default.
	DefaultMCPHeartbeat = 5 * time.Second
	// DefaultMCPSessionIdle is MCPOptions.SessionIdle's default. Clients
	// hold an event stream open for as long as they run, so the time
	// counts only for a client that has gone without closing its MCP
	// session; it is short because the workspace is memory, and long
	// enough for a client to reconnect.
	DefaultMCPSessionIdle = 5 * time.Minute
)

// MCPOptions configures the MCP front end. The zero value is usable: each
// field documents its zero.
type MCPOptions struct {
	// Max are the run chain's maxima (run.ChainOptions.Max): the tools'
	// descriptions and schemas state the limits, default and maximum
	// timeout they give (Max.Defaults, Max.ToolTimeouts), and the chain
	// applies them to every call, which leaves them unset. Tool calls
	// cannot change the limits.
	Max run.Maxima
	// MaxTimeout is set from Max (the tools' maximum timeout); a value
	// given here is replaced.
	MaxTimeout time.Duration
	// MaxOutput is how many characters (Unicode code points, as UTF-8;
	// a byte that is not UTF-8 counts as one) of each of stdout and
	// stderr a result keeps, the middle elided beyond it; zero means
	// DefaultMCPMaxOutput, and it is lowered to what Max.MaxOutput lets
	// the sandbox keep: MCPCaptureBytes(MaxOutput) bytes of each.
	MaxOutput int64
	// WorkDir is the sandboxes' working directory (the jail's
	// Config.WorkDir), which the tools' descriptions name; empty means
	// box.DefaultDir.
	WorkDir string
	// Shell runs the bash tool's command as Shell -c COMMAND inside the
	// sandbox; empty means "/bin/bash".
	Shell string
	// Tools are the tools served, of MCPTools; nil means DefaultMCPTools
	// (bash and execute). Names that are not tools are skipped: check
	// them with CheckMCPTools.
	Tools []string
	// NetworkMaxOutput is what run_network_tool keeps of each stream
	// before it appends "...truncated..."; zero means
	// NetworkToolMaxOutput (1 MiB). It is lowered to Max.MaxOutput.
	NetworkMaxOutput int64
	// Egress lets a tool call ask for network access through the egress
	// proxy ("egress": true, the operator's allowlist); without it the
	// tools' schemas have no egress argument and a call giving one fails.
	Egress bool
	// AllowedOrigins are browser origins ("https://app.example.com")
	// accepted by the HTTP handler in addition to loopback ones. Requests
	// without an Origin header (non-browser clients) are always accepted.
	AllowedOrigins []string
	// SessionTimeout closes idle Streamable HTTP sessions; zero means
	// DefaultMCPSessionTimeout, negative means never.
	SessionTimeout time.Duration
	// Heartbeat is how long a command may stay silent before a progress
	// notification without a message says it still runs (for clients that
	// reset their request timeout on progress); zero means
	// DefaultMCPHeartbeat.
	Heartbeat time.Duration
	// Version is reported to clients in serverInfo; empty means the
	// module version from the build info.
	Version string
	// Sessions, if not nil, gives every MCP session a jaild session of
	// its own at its first tool call (see mcp_session.go), made by its
	// Create as POST /sessions' are, so that files, the working
	// directory, exported variables and background tasks carry across its
	// calls, and adds bash's run_in_background and the task_output,
	// kill_task and list_tasks tools. Nil: every call is one-shot. With
	// Egress, and Sessions.Egress's proxy, each jaild session gets egress
	// (the operator's allowlist, decided for the caller of its first
	// call): every call and task of it has network through the proxy,
	// and the tools offer no egress argument.
	Sessions *run.Sessions
	// SessionIdle is how long an MCP session's jaild session (attached:
	// session.Options.Attached) is kept once nothing holds it: no
	// request of its MCP session open (over Streamable HTTP a call, or
	// the client's event stream) and nothing running in it. Zero means
	// DefaultMCPSessionIdle. Over stdio the client is there until stdin
	// closes, which removes the session.
	SessionIdle time.Duration
	// Audit, if not nil, records the tool calls refused before they
	// became a run (as the HTTP front end records its refusals); the
	// chain records the rest.
	Audit *run.AuditLog
	// Caller names, in the audit log and to the policy, the caller of a
	// request that carries none: over stdio, whoever started the server
	// ("stdio:uid:1000"). Requests authenticated over HTTP name their own.
	Caller string
	// SessionID, if not nil, mints MCP session ids (in a fleet: ids that
	// name this daemon, see package route); nil means the SDK's.
	SessionID func() string
	// Logger receives one line per tool call (never its output) and the
	// SDK's messages; nil discards them.
	Logger *slog.Logger
}

func (o MCPOptions) withDefaults() MCPOptions {
	_, o.MaxTimeout = o.Max.ToolTimeouts()
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMCPMaxOutput
	}
	if o.NetworkMaxOutput <= 0 {
		o.NetworkMaxOutput = NetworkToolMaxOutput
	}
	if m := o.Max.MaxOutput; m > 0 {
		// What the sandbox may keep: the chain refuses more.
		o.MaxOutput = max(min(o.MaxOutput, m/MCPCaptureBytes(1)), 1)
		o.NetworkMaxOutput = min(o.NetworkMaxOutput, m)
	}
	if o.Shell == "" {
		o.Shell = "/bin/bash"
	}
	if o.Tools == nil {
		o.Tools = DefaultMCPTools
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultMCPHeartbeat
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultMCPSessionTimeout
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = DefaultMCPSessionIdle
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
	// RunInBackground is served only with MCPOptions.Sessions.
	RunInBackground bool `json:"run_in_background,omitempty" jsonschema:"Start the command as a background task and return its task_id at once (for servers and long jobs); read it with task_output, stop it with kill_task. Only where this server keeps sessions."`
	Egress          bool `json:"egress,omitempty" jsonschema:"Give the sandbox network access, through jaild's HTTP proxy, to the destinations the operator allows (HTTP_PROXY and HTTPS_PROXY are set; there is no DNS otherwise)."`
}

// ExecuteInput is the argument of the execute tool: a program and its
// arguments, with no shell in between.
type ExecuteInput struct {
	Command   string   `json:"command" jsonschema:"The program to run, looked up in PATH inside the sandbox (e.g. 'python3') or an absolute path. No shell is involved: do not put arguments, pipes or quotes here."`
	Args      []string `json:"args,omitempty" jsonschema:"Arguments passed to the program as they are, one per element, without shell quoting or expansion."`
	Stdin     string   `json:"stdin,omitempty" jsonschema:"Text fed to the program's standard input; empty means no input (/dev/null)."`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"Timeout in milliseconds. The sandbox is killed when it expires and the result still carries the output produced so far."`
	Egress    bool     `json:"egress,omitempty" jsonschema:"Give the sandbox network access, through jaild's HTTP proxy, to the destinations the operator allows (HTTP_PROXY and HTTPS_PROXY are set; there is no DNS otherwise)."`
}

// RunOutput is the structured result of both tools: the output and the
// jail's verdict.
type RunOutput struct {
	ExitCode  int    `json:"exit_code" jsonschema:"The command's exit status; -1 if a signal killed it (see signal)."`
	Stdout    string `json:"stdout" jsonschema:"Standard output. Beyond the output limit its middle is replaced by a line '[... jaild: N bytes of output elided ...]'."`
	Stderr    string `json:"stderr" jsonschema:"Standard error, elided like stdout."`
	TimeoutMS int64  `json:"timeout_ms" jsonschema:"The timeout that applied, in milliseconds, after the default and the operator's maximum."`
	TaskID    string `json:"task_id,omitempty" jsonschema:"With run_in_background: the id of the task started (nothing else is set)."`
	api.Verdict
}

// NewMCPServer returns an MCP server with the bash and execute tools, each
// call run by r in a fresh sandbox. Serve it with [mcp.Server.Run] over
// stdio, or over HTTP with [NewMCPHandler].
//
// With MCPOptions.Sessions the MCP session's jaild session is removed when
// the session closes (when Run returns over stdio), by a goroutine that
// ends then.
func NewMCPServer(r run.Runner, opts MCPOptions) *mcp.Server {
	s, _ := newMCPServer(r, opts.withDefaults(), nil)
	return s
}

// postContext finds the context of the HTTP request that carried a tool
// call, if any (see [mcpHandler]).
type postContext func(*mcp.CallToolRequest) (context.Context, bool)

func newMCPServer(r run.Runner, o MCPOptions, post postContext) (*mcp.Server, *mcpTools) {
	t := &mcpTools{run: r, opts: o, log: o.Logger, post: post}
	if o.Sessions != nil {
		t.sess = newMCPSessions(o.Sessions, o.SessionIdle, o.Logger)
		t.sess.egress = o.Egress && o.Sessions.Egress.Proxy != nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "jaild", Title: "jaild sandboxed shell", Version: o.Version}, &mcp.ServerOptions{
		Instructions: t.toolInstructions(),
		Logger:       o.Logger,
		// Tools only: no logging capability (the SDK's historical default),
		// since jaild logs on its own side, never into the model's context.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		GetSessionID: o.SessionID,
	})
	if slices.Contains(o.Tools, ToolBash) {
		mcp.AddTool(s, &mcp.Tool{
			Name:         ToolBash,
			Title:        "Run a shell command in a sandbox",
			Description:  t.bashDescription(),
			InputSchema:  t.bashSchema(),
			OutputSchema: outputSchema(),
			Annotations:  toolAnnotations(t.opts.Egress),
		}, t.bash)
	}
	if slices.Contains(o.Tools, ToolExecute) {
		mcp.AddTool(s, &mcp.Tool{
			Name:         ToolExecute,
			Title:        "Run a program in a sandbox",
			Description:  t.executeDescription(),
			InputSchema:  t.executeSchema(),
			OutputSchema: outputSchema(),
			Annotations:  toolAnnotations(t.opts.Egress),
		}, t.execute)
	}
	if slices.Contains(o.Tools, ToolRunNetworkTool) {
		t.addNetworkTool(s)
	}
	if t.servesTasks() {
		t.addTaskTools(s)
	}
	return s, t
}
