package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
)

// The run_network_tool tool: the policy-runner convention's one MCP tool,
// in its shapes, so that its clients switch to jaild unchanged. It runs
// through the same chain as bash and execute (front end
// "mcp:run_network_tool"), so the operator's policy decides it.

// MCP tool names, for MCPOptions.Tools.
const (
	ToolBash           = "bash"
	ToolExecute        = "execute"
	ToolRunNetworkTool = "run_network_tool"
)

// MCPTools are the tools MCPOptions.Tools may list; DefaultMCPTools those
// served when it lists none.
var (
	MCPTools        = []string{ToolBash, ToolExecute, ToolRunNetworkTool}
	DefaultMCPTools = []string{ToolBash, ToolExecute}
)

// NetworkToolMaxOutput is what run_network_tool keeps of each stream, as
// the convention caps it (1 MiB); beyond it the stream is cut and
// NetworkToolTruncated appended.
const (
	NetworkToolMaxOutput = 1 << 20
	NetworkToolTruncated = "...truncated..."
)

// CheckMCPTools reports the first name that is no tool, or an empty list.
func CheckMCPTools(names []string) error {
	if len(names) == 0 {
		return errors.New("no MCP tool listed")
	}
	for _, n := range names {
		if !slices.Contains(MCPTools, n) {
			return fmt.Errorf("unknown MCP tool %q (known: %s)", n, strings.Join(MCPTools, ", "))
		}
	}
	return nil
}

// NetworkToolInput is run_network_tool's argument, as the convention has
// it: cwd and env may be null.
type NetworkToolInput struct {
	Executable string            `json:"executable" jsonschema:"The program to run, looked up in PATH inside the sandbox or an absolute path. No shell is involved."`
	Args       []string          `json:"args,omitempty" jsonschema:"Arguments passed to the program as they are."`
	Cwd        *string           `json:"cwd,omitempty" jsonschema:"Working directory inside the sandbox: /work (the default), /tmp, or below them."`
	Env        map[string]string `json:"env,omitempty" jsonschema:"Environment variables to forward, NAME: value; the policy sees them as input.env."`
}

// NetworkToolOutput is run_network_tool's structured result, as the
// convention has it.
type NetworkToolOutput struct {
	Stdout string `json:"stdout" jsonschema:"Standard output, cut at 1 MiB with ...truncated... appended."`
	Stderr string `json:"stderr" jsonschema:"Standard error, cut like stdout."`
	// ExitCode is null when the command did not exit by itself: killed by
	// a signal, the timeout or the OOM killer.
	ExitCode *int `json:"exitCode" jsonschema:"The exit status; null if the command was killed (signal, timeout, out of memory)."`
}

func (t *mcpTools) networkToolDescription() string {
	return "Run one program with the given arguments, cwd and environment, without a shell, as the operator's " +
		"policy allows, and return its stdout, stderr and exitCode. Output is capped at 1 MiB per stream; " +
		"truncated output ends with ...truncated.... " + t.sandboxText()
}

func (t *mcpTools) networkToolSchema() *jsonschema.Schema {
	s := mustSchema[NetworkToolInput]()
	s.Properties["executable"].MinLength = jsonschema.Ptr(1)
	env := s.Properties["env"]
	env.PropertyNames = &jsonschema.Schema{Type: "string", Pattern: `^[^=\x00]+$`}
	env.Type, env.Types = "", []string{"null", "object"} // the convention's object<string,string> | null
	s.Properties["cwd"].Description = t.atWorkDir(s.Properties["cwd"].Description)
	return s
}

// toolInstructions are the server's instructions: the bash and execute
// tools', and a sentence on run_network_tool when it is served.
// toolInstructions are the initialize instructions: the tools served, each
// in a phrase, then the sandbox they run in.
func (t *mcpTools) toolInstructions() string {
	var tools []string
	if t.serves(ToolBash) {
		tools = append(tools, "`bash` runs a shell command line")
	}
	if t.serves(ToolExecute) {
		tools = append(tools, "`execute` runs one program with exact arguments and optional stdin")
	}
	if t.serves(ToolRunNetworkTool) {
		tools = append(tools, "`run_network_tool` runs one program with arguments, cwd and env "+
			"(the policy-runner convention's tool) and returns stdout, stderr and exitCode")
	}
	if t.servesTasks() {
		tools = append(tools, "`task_output`, `kill_task` and `list_tasks` follow the tasks that bash's run_in_background starts")
	}
	return "jaild runs commands in sandboxes. " + sentence(tools) + " " + t.sandboxText()
}

func (t *mcpTools) serves(tool string) bool { return slices.Contains(t.opts.Tools, tool) }

// servesTasks reports whether the task tools are served: with sessions,
// for bash's run_in_background.
func (t *mcpTools) servesTasks() bool { return t.sess != nil && t.serves(ToolBash) }

// sentence joins phrases as a sentence: "a.", "a and b.", "a, b and c.".
func sentence(phrases []string) string {
	switch len(phrases) {
	case 0:
		return ""
	case 1:
		return upperFirst(phrases[0]) + "."
	}
	return upperFirst(strings.Join(phrases[:len(phrases)-1], "; ")) + "; and " + phrases[len(phrases)-1] + "."
}

// upperFirst capitalizes a phrase, unless it starts with a `name`.
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (t *mcpTools) addNetworkTool(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:         ToolRunNetworkTool,
		Title:        "Run a program in a sandbox, as the policy allows",
		Description:  t.networkToolDescription(),
		InputSchema:  t.networkToolSchema(),
		OutputSchema: mustSchema[NetworkToolOutput](),
		Annotations:  toolAnnotations(false),
	}, t.networkTool)
}

// networkTool runs a call of run_network_tool. A command that ran is a
// result, whatever its exit status (the convention's clients read
// exitCode); a call that did not run (invalid, denied by the policy, not
// found) is a tool error with the message.
func (t *mcpTools) networkTool(ctx context.Context, req *mcp.CallToolRequest, in NetworkToolInput) (*mcp.CallToolResult, *NetworkToolOutput, error) {
	if in.Executable == "" {
		return nil, nil, errors.New("invalid arguments: executable is empty")
	}
	env, err := box.EnvList(in.Env)
	if err != nil {
		return nil, nil, t.refuse(ctx, err)
	}
	limit := t.opts.NetworkMaxOutput
	stdout, stderr := &headWriter{max: limit}, &headWriter{max: limit}
	cmd := box.Command{Args: append([]string{in.Executable}, in.Args...), Env: env}
	if in.Cwd != nil {
		cmd.Dir = *in.Cwd
	}
	// The bash and execute tools' call, with the convention's cap (the
	// jail's own copy is a bound only: the result is the heads).
	nt := *t
	nt.opts.MaxOutput = limit
	nt.run = teeRunner{next: t.run, stdout: stdout, stderr: stderr}
	_, ro, err := nt.call(ctx, req, ToolRunNetworkTool, "", "", 0, false, cmd, false)
	if err != nil {
		return nil, nil, err
	}
	out := &NetworkToolOutput{Stdout: stdout.String(), Stderr: stderr.String()}
	if ro.Signal == "" && ro.ExitCode >= 0 && !ro.TimedOut && !ro.OOMKilled {
		code := ro.ExitCode
		out.ExitCode = &code
	}
	// Content is left to the SDK: the structured result as JSON text.
	return nil, out, nil
}

// teeRunner gives a run's output to stdout and stderr too, besides the
// writers the request already has (an MCP progress stream).
type teeRunner struct {
	next           run.Runner
	stdout, stderr io.Writer
}

func (r teeRunner) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	return r.next.Run(ctx, r.teed(req))
}

func (r teeRunner) Start(ctx context.Context, req run.Request) (string, error) {
	return r.next.Start(ctx, r.teed(req))
}

// teed is req with a spec of its own whose output goes to r's writers too.
func (r teeRunner) teed(req run.Request) run.Request {
	s := *req.Spec
	s.Stdout = tee(r.stdout, s.Stdout)
	s.Stderr = tee(r.stderr, s.Stderr)
	req.Spec = &s
	return req
}

// tee is w, and also other when there is one.
func tee(w, other io.Writer) io.Writer {
	if other == nil {
		return w
	}
	return io.MultiWriter(w, other)
}

// headWriter keeps the first max bytes written to it and counts the rest.
// The jail writes from its own goroutine; String is called after the run.
type headWriter struct {
	mu    sync.Mutex
	max   int64
	buf   []byte
	total int64
}

func (h *headWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - int64(len(h.buf)); room > 0 {
		h.buf = append(h.buf, p[:min(int64(len(p)), room)]...)
	}
	h.total += int64(len(p))
	return len(p), nil
}

// String is the head, with NetworkToolTruncated appended if there was more.
// A cut inside a UTF-8 sequence is moved back to its start, so the text
// does not end in a broken character.
func (h *headWriter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total <= int64(len(h.buf)) {
		return string(h.buf)
	}
	b := h.buf
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				b = b[:len(b)-i]
			}
			break
		}
	}
	return string(b) + NetworkToolTruncated
}
