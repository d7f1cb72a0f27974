package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// connect serves NewMCPServer(r, opts) over in-memory transports and
// returns a connected client session.
func connect(t *testing.T, b run.Base, opts MCPOptions, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	// The chain, which gives a call its defaults and maxima; admission
	// lets every call in at once.
	r, err := run.Chain(b, run.ChainOptions{Max: opts.Max, WorkDir: opts.WorkDir, Admission: run.AdmitOptions{MaxConcurrent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := NewMCPServer(r, opts).Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, RunOutput) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %v): protocol error %v", tool, args, err)
	}
	var out RunOutput
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("structured content %s: %v", b, err)
		}
	}
	return res, out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPListTools(t *testing.T) {
	cs := connect(t, &FakeBase{}, MCPOptions{}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"bash", "execute"}) {
		t.Fatalf("tools = %v, want bash and execute", names)
	}
	wantProps := map[string][]string{
		"bash":    {"command", "description", "timeout", "cwd", "env"},
		"execute": {"command", "args", "stdin", "timeout_ms"},
	}
	for _, tool := range res.Tools {
		t.Run(tool.Name, func(t *testing.T) {
			if !strings.Contains(tool.Description, "sandbox") || !strings.Contains(tool.Description, "600000") {
				t.Errorf("description does not explain the sandbox and the timeout ceiling: %q", tool.Description)
			}
			in := schemaOf(t, tool.InputSchema)
			if !slices.Equal(in.Required, []string{"command"}) {
				t.Errorf("required = %v, want [command]", in.Required)
			}
			var props []string
			for name, p := range in.Properties {
				props = append(props, name)
				if p.Description == "" {
					t.Errorf("input property %q has no description", name)
				}
			}
			slices.Sort(props)
			want := slices.Sorted(slices.Values(wantProps[tool.Name]))
			if !slices.Equal(props, want) {
				t.Errorf("input properties = %v, want %v", props, want)
			}
			out := schemaOf(t, tool.OutputSchema)
			for _, name := range []string{"stdout", "stderr", "exit_code", "timed_out", "oom_killed", "pids_limit_hit",
				"stdout_truncated", "stderr_truncated", "duration_ms", "cpu_ms", "memory_peak_bytes"} {
				p, ok := out.Properties[name]
				if !ok {
					t.Errorf("output schema lacks %q", name)
				} else if p.Description == "" {
					t.Errorf("output property %q has no description", name)
				}
			}
			timeout := in.Properties[map[string]string{"bash": "timeout", "execute": "timeout_ms"}[tool.Name]]
			// No schema maximum: larger values are reduced, as the
			// description says.
			if timeout.Maximum != nil || !strings.Contains(timeout.Description, "Maximum 600000: larger values are reduced") {
				t.Errorf("timeout maximum = %v, description %q", timeout.Maximum, timeout.Description)
			}
		})
	}
}

func schemaOf(t *testing.T, v any) *jsonschema.Schema {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("schema %s: %v", b, err)
	}
	return &s
}

func TestMCPBashSuccess(t *testing.T) {
	f := &FakeBase{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		return &box.Result{ID: "sb1", Stdout: "hi\n", StdoutBytes: 3, Duration: 12 * time.Millisecond, CPUTime: 3 * time.Millisecond, MemoryPeak: 3 << 20}, nil
	}}
	limits := box.Limits{Memory: 128 << 20, Pids: 64, CPUs: 1, TmpfsSize: 64 << 20}
	cs := connect(t, f, MCPOptions{Max: run.Maxima{Limits: box.Limits{Memory: 128 << 20, Pids: 64}}}, nil)
	res, out := call(t, cs, "bash", map[string]any{
		"command": "echo hi", "description": "say hi", "cwd": "/work/sub", "env": map[string]string{"B": "2", "A": "1"},
	})
	if res.IsError {
		t.Fatalf("isError for exit 0: %s", text(res))
	}
	if out.Stdout != "hi\n" || out.ExitCode != 0 || out.ID != "sb1" || out.DurationMS != 12 || out.MemoryPeakBytes != 3<<20 {
		t.Errorf("structured output = %+v", out)
	}
	if txt := text(res); !strings.Contains(txt, "exit code 0") || !strings.Contains(txt, "--- stdout ---\nhi\n") {
		t.Errorf("text = %q", txt)
	}
	specs := f.Calls()
	if len(specs) != 1 {
		t.Fatalf("runner called %d times", len(specs))
	}
	s := specs[0]
	if !slices.Equal(s.Args, []string{"/bin/bash", "-c", "echo hi"}) || !slices.Equal(s.Env, []string{"A=1", "B=2"}) ||
		s.Dir != "/work/sub" || s.Timeout != DefaultMCPTimeout || s.MaxOutput != MCPCaptureBytes(DefaultMCPMaxOutput) || s.Limits != limits {
		t.Errorf("spec = %+v", s)
	}
	if s.Stdout != nil || s.Stderr != nil {
		t.Error("output tees set without a progress token")
	}
}

func TestMCPExecute(t *testing.T) {
	f := &FakeBase{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		in, err := io.ReadAll(s.Stdin)
		if err != nil {
			return nil, err
		}
		return &box.Result{Stdout: strings.ToUpper(string(in))}, nil
	}}
	cs := connect(t, f, MCPOptions{}, nil)
	res, out := call(t, cs, "execute", map[string]any{"command": "tr", "args": []string{"a-z", "A-Z"}, "stdin": "hello", "timeout_ms": 5000})
	if res.IsError || out.Stdout != "HELLO" {
		t.Fatalf("isError=%v out=%+v text=%q", res.IsError, out, text(res))
	}
	s := f.Calls()[0]
	if !slices.Equal(s.Args, []string{"tr", "a-z", "A-Z"}) || s.Timeout != 5*time.Second || out.TimeoutMS != 5000 {
		t.Errorf("spec = %+v, timeout_ms %d", s, out.TimeoutMS)
	}
}

func TestMCPVerdicts(t *testing.T) {
	elided := "head" + box.Elide(1000) + "tail"
	tests := []struct {
		name      string
		result    box.Result
		isError   bool
		wantTexts []string
	}{
		{"non-zero exit keeps output", box.Result{ExitCode: 2, Stdout: "partial\n", Stderr: "boom\n"}, true,
			[]string{"exit code 2", "--- stdout ---\npartial\n", "--- stderr ---\nboom\n"}},
		{"timeout keeps partial output", box.Result{ExitCode: -1, Signal: "SIGKILL", TimedOut: true, Stdout: "tick\n"}, true,
			[]string{"TIMED OUT after 120000 ms", "tick"}},
		{"oom", box.Result{ExitCode: -1, Signal: "SIGKILL", OOMKilled: true}, true,
			[]string{"killed by SIGKILL", "OUT OF MEMORY", "256 MiB", "(no output)"}},
		{"oom with exit 0 is still an error", box.Result{OOMKilled: true}, true, []string{"OUT OF MEMORY"}},
		{"pids limit alone is not an error", box.Result{PidsLimitHit: true, Stderr: "fork: retry\n"}, false,
			[]string{"PROCESS LIMIT HIT", "256 processes"}},
		{"elided output", box.Result{Stdout: elided, StdoutBytes: 1008, StdoutTruncated: true}, false,
			[]string{"--- stdout (1008 bytes, middle elided) ---", "[... jaild: 1000 bytes of output elided ...]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &FakeBase{Fn: func(context.Context, *jail.Spec) (*box.Result, error) { r := tt.result; return &r, nil }}
			cs := connect(t, f, MCPOptions{}, nil)
			res, out := call(t, cs, "bash", map[string]any{"command": "x"})
			if res.IsError != tt.isError {
				t.Errorf("isError = %v, want %v", res.IsError, tt.isError)
			}
			if out.Stdout != tt.result.Stdout || out.Stderr != tt.result.Stderr || out.TimedOut != tt.result.TimedOut ||
				out.OOMKilled != tt.result.OOMKilled || out.PidsLimitHit != tt.result.PidsLimitHit ||
				out.StdoutTruncated != tt.result.StdoutTruncated || out.ExitCode != tt.result.ExitCode || out.Signal != tt.result.Signal {
				t.Errorf("structured output %+v does not match result %+v", out, tt.result)
			}
			for _, want := range tt.wantTexts {
				if !strings.Contains(text(res), want) {
					t.Errorf("text lacks %q:\n%s", want, text(res))
				}
			}
		})
	}
}

func TestMCPBadArguments(t *testing.T) {
	tests := []struct {
		name    string
		tool    string
		args    any
		want    string // in the error text
		reaches bool   // whether the jail is reached (the chain refuses what is invalid before)
	}{
		{"missing command", "bash", map[string]any{}, "command", false},
		{"no arguments at all", "bash", nil, "command", false},
		{"empty command", "bash", map[string]any{"command": ""}, "command", false},
		{"blank command", "bash", map[string]any{"command": "  "}, "command is empty", false},
		{"command of wrong type", "bash", map[string]any{"command": 42}, "command", false},
		{"arguments not an object", "bash", []string{"ls"}, "", false},
		{"unknown property", "bash", map[string]any{"command": "ls", "run_in_background": true}, "run_in_background", false},
		{"negative timeout", "bash", map[string]any{"command": "ls", "timeout": -1}, "timeout", false},
		{"fractional timeout", "bash", map[string]any{"command": "ls", "timeout": 1.5}, "timeout", false},
		{"env name with =", "bash", map[string]any{"command": "ls", "env": map[string]string{"A=B": "c"}}, "env", false},
		{"env value not a string", "bash", map[string]any{"command": "ls", "env": map[string]any{"A": 1}}, "env", false},
		{"cwd outside the sandbox dirs", "bash", map[string]any{"command": "ls", "cwd": "/etc"}, "invalid cwd", false},
		{"relative cwd", "bash", map[string]any{"command": "ls", "cwd": "work"}, "invalid cwd", false},
		{"NUL in command", "bash", map[string]any{"command": "ls\x00"}, "NUL", false},
		{"execute without command", "execute", map[string]any{"args": []string{"x"}}, "command", false},
		{"execute args not strings", "execute", map[string]any{"command": "ls", "args": []any{1}}, "args", false},
		{"execute negative timeout", "execute", map[string]any{"command": "ls", "timeout_ms": -5}, "timeout_ms", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &FakeBase{}
			cs := connect(t, f, MCPOptions{}, nil)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("protocol error %v, want a tool error", err)
			}
			if !res.IsError {
				t.Fatalf("not a tool error: %s", text(res))
			}
			if !strings.Contains(text(res), tt.want) {
				t.Errorf("error text %q does not mention %q", text(res), tt.want)
			}
			if got := len(f.Calls()) > 0; got != tt.reaches {
				t.Errorf("runner reached = %v, want %v", got, tt.reaches)
			}
		})
	}
	t.Run("server survives", func(t *testing.T) {
		f := &FakeBase{Fn: func(context.Context, *jail.Spec) (*box.Result, error) { panic("bug") }}
		cs := connect(t, f, MCPOptions{}, nil)
		res, _ := call(t, cs, "bash", map[string]any{"command": "x"})
		if !res.IsError || !strings.Contains(text(res), "internal error") {
			t.Errorf("panic in runner: %s", text(res))
		}
		f.Fn = nil
		if res, _ := call(t, cs, "bash", map[string]any{"command": "x"}); res.IsError {
			t.Errorf("call after a panic failed: %s", text(res))
		}
	})
}

func TestMCPRunnerErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"not found", fmt.Errorf("start: %w", box.ErrCommandNotFound), "command not found in the sandbox: nosuch"},
		{"not executable", box.ErrNotExecutable, "command not executable in the sandbox: nosuch"},
		{"busy", errors.New("admission: queue full"), "jaild could not run the command: admission: queue full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &FakeBase{Fn: func(context.Context, *jail.Spec) (*box.Result, error) { return nil, tt.err }}
			cs := connect(t, f, MCPOptions{}, nil)
			res, _ := call(t, cs, "execute", map[string]any{"command": "nosuch"})
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Errorf("isError=%v text=%q, want %q", res.IsError, text(res), tt.want)
			}
		})
	}
}

func TestMCPUnknownToolIsProtocolError(t *testing.T) {
	cs := connect(t, &FakeBase{}, MCPOptions{}, nil)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "rm_rf", Arguments: map[string]any{}})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("err = %v, want a JSON-RPC invalid params error", err)
	}
}

func TestMCPTimeoutClamp(t *testing.T) {
	tests := []struct {
		name      string
		opts      MCPOptions
		arg       any // bash "timeout"; nil = absent
		want      time.Duration
		noteClamp bool
	}{
		{"default", MCPOptions{}, nil, 120 * time.Second, false},
		{"zero means default", MCPOptions{}, 0, 120 * time.Second, false},
		{"requested", MCPOptions{}, 1500, 1500 * time.Millisecond, false},
		{"schema maximum", MCPOptions{}, 600000, 600 * time.Second, false},
		{"operator maximum", MCPOptions{Max: run.Maxima{Timeout: 30 * time.Second}}, 600000, 30 * time.Second, true},
		{"default above operator maximum", MCPOptions{Max: run.Maxima{Timeout: 30 * time.Second}}, nil, 30 * time.Second, false},
		{"operator default", MCPOptions{Max: run.Maxima{ToolTimeout: 10 * time.Second}}, nil, 10 * time.Second, false},
		{"operator maximum above the schema's", MCPOptions{Max: run.Maxima{Timeout: time.Hour}}, 600000, 600 * time.Second, false},
		{"above the maximum", MCPOptions{}, 600001, 600 * time.Second, true},
		{"far above the maximum", MCPOptions{}, 1e15, 600 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &FakeBase{}
			cs := connect(t, f, tt.opts, nil)
			args := map[string]any{"command": "sleep 1"}
			if tt.arg != nil {
				args["timeout"] = tt.arg
			}
			res, out := call(t, cs, "bash", args)
			if res.IsError {
				t.Fatalf("tool error: %s", text(res))
			}
			if got := f.Calls()[0].Timeout; got != tt.want {
				t.Errorf("runner timeout = %v, want %v", got, tt.want)
			}
			if out.TimeoutMS != tt.want.Milliseconds() {
				t.Errorf("timeout_ms = %d, want %d", out.TimeoutMS, tt.want.Milliseconds())
			}
			if got := strings.Contains(text(res), "reduced"); got != tt.noteClamp {
				t.Errorf("text notes clamp = %v, want %v: %q", got, tt.noteClamp, text(res))
			}
		})
	}
}

func TestMCPCancellationKillsRun(t *testing.T) {
	b := NewGate()
	cs := connect(t, b, MCPOptions{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 1000"}})
		errc <- err
	}()
	Recv(t, b.Entered, "the run to start")
	cancel() // the client sends notifications/cancelled
	if err := Recv(t, b.Ended, "the runner's ctx to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("runner ended with %v, want context.Canceled", err)
	}
	if err := Recv(t, errc, "CallTool to return"); err == nil {
		t.Error("cancelled CallTool returned no error")
	}
	// The session is still usable.
	b.Open()
	if res, _ := call(t, cs, "bash", map[string]any{"command": "true"}); res.IsError {
		t.Errorf("call after cancellation: %s", text(res))
	}
}

func TestMCPDisconnectKillsRun(t *testing.T) {
	b := NewGate()
	// A raw connection, so the "client" can vanish without the polite
	// cancellation the SDK client sends on Close.
	conn := rawConn(t, b)
	conn.send(t, 1, "initialize", initParams("2025-11-25"))
	if r := conn.response(t); r.Error != nil {
		t.Fatalf("initialize: %v", r.Error)
	}
	conn.send(t, nil, "notifications/initialized", map[string]any{})
	conn.send(t, 2, "tools/call", map[string]any{"name": "bash", "arguments": map[string]any{"command": "sleep 1000"}})
	Recv(t, b.Entered, "the run to start")
	conn.Close()
	if err := Recv(t, b.Ended, "the runner's ctx to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("runner ended with %v, want context.Canceled", err)
	}
}

func TestMCPConcurrentCalls(t *testing.T) {
	const n = 10
	b := NewGate()
	cs := connect(t, b, MCPOptions{}, nil)
	type result struct {
		i   int
		out RunOutput
		err error
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": fmt.Sprintf("echo %d", i)}})
			r := result{i: i, err: err}
			if err == nil {
				b, _ := json.Marshal(res.StructuredContent)
				r.err = json.Unmarshal(b, &r.out)
			}
			results <- r
		})
	}
	// All n runs are in flight at once before any is released: calls on
	// one session are not serialized.
	for range n {
		Recv(t, b.Entered, "all calls to be running at once")
	}
	b.Open()
	wg.Wait()
	close(results)
	for r := range results {
		if want := fmt.Sprintf("/bin/bash -c echo %d", r.i); r.err != nil || r.out.Stdout != want {
			t.Errorf("call %d: err %v, stdout %q, want %q", r.i, r.err, r.out.Stdout, want)
		}
	}
}

func TestMCPProgressStreamsOutput(t *testing.T) {
	var mu sync.Mutex
	var notes []*mcp.ProgressNotificationParams
	seen := make(chan string, 100)
	copts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		notes = append(notes, req.Params)
		mu.Unlock()
		seen <- req.Params.Message
	}}
	euro := "€" // 3 bytes, written split across two writes
	f := &FakeBase{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		io.WriteString(s.Stdout, "first line\n")
		// The client sees output while the command still runs.
		for msg := ""; !strings.Contains(msg, "first line"); {
			select {
			case msg = <-seen:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		io.WriteString(s.Stderr, "warning\n")
		s.Stdout.Write([]byte(euro)[:1])
		s.Stdout.Write([]byte(euro)[1:])
		io.WriteString(s.Stdout, "\nlast\n")
		return &box.Result{Stdout: "first line\n" + euro + "\nlast\n", Stderr: "warning\n"}, nil
	}}
	cs := connect(t, f, MCPOptions{}, copts)
	params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "x", "timeout": 9000}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("CallTool: %v %v", err, res)
	}
	// Notifications precede the response on the wire, but the client
	// handles them on another goroutine than the one returning the result.
	const wantOut, wantErr = "first line\n€\nlast\n", "warning\n"
	deadline := time.After(TestPatience)
	for {
		mu.Lock()
		var stdout, stderr strings.Builder
		last := 0.0
		for _, n := range notes {
			if n.ProgressToken != "tok-1" {
				t.Fatalf("progress token %v", n.ProgressToken)
			}
			if n.Progress <= last {
				t.Fatalf("progress %v does not increase (previous %v)", n.Progress, last)
			}
			last = n.Progress
			switch n.Meta[ProgressStreamMetaKey] {
			case "stdout":
				stdout.WriteString(n.Message)
			case "stderr":
				stderr.WriteString(n.Message)
			}
		}
		mu.Unlock()
		if stdout.String() == wantOut && stderr.String() == wantErr {
			return
		}
		select {
		case <-seen:
		case <-deadline:
			t.Fatalf("streamed stdout %q stderr %q, want %q and %q", stdout.String(), stderr.String(), wantOut, wantErr)
		}
	}
}

func TestMCPProgressHeartbeat(t *testing.T) {
	beats := make(chan *mcp.ProgressNotificationParams, 100)
	copts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		beats <- req.Params
	}}
	f := &FakeBase{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		// A silent command: the client still hears from the server, so
		// a client that resets its timeout on progress keeps waiting.
		for range 2 {
			select {
			case n := <-beats:
				if n.Message != "" || n.Meta[ProgressStreamMetaKey] != nil {
					return nil, fmt.Errorf("heartbeat carries output: %+v", n)
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &box.Result{}, nil
	}}
	cs := connect(t, f, MCPOptions{Heartbeat: 50 * time.Millisecond}, copts)
	params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 10"}}
	params.SetProgressToken(7)
	ctx, cancel := context.WithTimeout(context.Background(), TestPatience)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("no heartbeats: %v %s", err, text(res))
	}
}

func TestProgressWriterBounds(t *testing.T) {
	t.Run("utf8 boundary", func(t *testing.T) {
		for _, tt := range []struct {
			in   string
			want int
		}{{"abc", 3}, {"a\xe2\x82", 1}, {"a\xe2\x82\xac", 4}, {"\xf0\x9f", 0}, {"\xff\xff", 2}, {"", 0}} {
			if got := completeUTF8([]byte(tt.in)); got != tt.want {
				t.Errorf("completeUTF8(%q) = %d, want %d", tt.in, got, tt.want)
			}
		}
	})
	t.Run("pending is bounded", func(t *testing.T) {
		p := &progressStream{dropped: map[string]int64{}, carry: map[string][]byte{}}
		w := p.writer("stdout")
		big := bytes.Repeat([]byte("x"), 100<<10)
		for range 10 {
			if n, err := w.Write(big); n != len(big) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if p.size > maxProgressPending {
			t.Errorf("pending %d bytes, bound %d", p.size, maxProgressPending)
		}
		chunks := p.take(true)
		tail := string(chunks[len(chunks)-1].data)
		want := fmt.Sprintf("%d bytes of output not streamed", 1000<<10-maxProgressPending)
		if !strings.Contains(tail, want) {
			t.Errorf("last chunk %q lacks %q", tail, want)
		}
	})
}

// rawConn speaks JSON-RPC directly, to check what the SDK client would
// paper over.
type raw struct {
	mcp.Connection
}

// rawConn serves NewMCPServer(r) over in-memory transports and returns a
// raw connection to it.
func rawConn(t *testing.T, b run.Base) raw {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewMCPServer(Direct(b), MCPOptions{}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	c, err := ct.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return raw{c}
}

func (c raw) send(t *testing.T, id any, method string, params any) {
	t.Helper()
	p, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	req := &jsonrpc.Request{Method: method, Params: p}
	if n, ok := id.(int); ok {
		id = float64(n) // as JSON decodes it, the only number type MakeID takes
	}
	if id != nil {
		if req.ID, err = jsonrpc.MakeID(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Write(context.Background(), req); err != nil {
		t.Fatalf("write %s: %v", method, err)
	}
}

func (c raw) response(t *testing.T) *jsonrpc.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), TestPatience)
	defer cancel()
	for {
		msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if r, ok := msg.(*jsonrpc.Response); ok {
			return r
		}
	}
}

func initParams(version string) map[string]any {
	return map[string]any{"protocolVersion": version, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}
}

func TestMCPProtocolNegotiation(t *testing.T) {
	for _, tt := range []struct{ client, want string }{
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
		{"2025-03-26", "2025-03-26"},
		{"2024-11-05", "2024-11-05"},
		{"2099-01-01", "2025-11-25"}, // unknown: the server offers its newest handshake version
	} {
		t.Run(tt.client, func(t *testing.T) {
			c := rawConn(t, &FakeBase{})
			c.send(t, 1, "initialize", initParams(tt.client))
			r := c.response(t)
			var res struct {
				ProtocolVersion string         `json:"protocolVersion"`
				Capabilities    map[string]any `json:"capabilities"`
			}
			if r.Error != nil || json.Unmarshal(r.Result, &res) != nil {
				t.Fatalf("initialize: %v %s", r.Error, r.Result)
			}
			if res.ProtocolVersion != tt.want {
				t.Errorf("negotiated %q, want %q", res.ProtocolVersion, tt.want)
			}
			if _, ok := res.Capabilities["tools"]; !ok {
				t.Errorf("capabilities %v lack tools", res.Capabilities)
			}
		})
	}
}

func TestMCPUnknownMethodsGetJSONRPCErrors(t *testing.T) {
	c := rawConn(t, &FakeBase{})
	// A client of a newer protocol probes before initializing; the
	// legacy-style probe (no per-request _meta) must fail cleanly so
	// that it falls back to initialize.
	c.send(t, "probe", "server/discover", map[string]any{})
	if r := c.response(t); r.Error == nil {
		t.Errorf("server/discover without _meta: result %s, want an error", r.Result)
	} else if werr, ok := r.Error.(*jsonrpc.Error); !ok || werr.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("server/discover: error %v, want method not found", r.Error)
	}
	// Other requests before initialize are refused, with an error.
	c.send(t, "x", "tasks/list", map[string]any{})
	if r := c.response(t); r.Error == nil {
		t.Errorf("tasks/list before initialize: result %s, want an error", r.Result)
	}
	c.send(t, 1, "initialize", initParams("2025-11-25"))
	if r := c.response(t); r.Error != nil {
		t.Fatalf("initialize after the probes: %v", r.Error)
	}
	c.send(t, nil, "notifications/initialized", map[string]any{})
	c.send(t, 2, "no/such/method", map[string]any{})
	checkMethodNotFound(t, c.response(t))
	c.send(t, 3, "tools/list", map[string]any{})
	if r := c.response(t); r.Error != nil {
		t.Errorf("tools/list after an unknown method: %v", r.Error)
	}
}

func checkMethodNotFound(t *testing.T, r *jsonrpc.Response) {
	t.Helper()
	werr, ok := r.Error.(*jsonrpc.Error)
	if !ok || werr.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("response %v / %s, want JSON-RPC error %d", r.Error, r.Result, jsonrpc.CodeMethodNotFound)
	}
}

// httpMCP serves NewMCPHandler on a loopback test server.
func httpMCP(t *testing.T, b run.Base, opts MCPOptions) string {
	t.Helper()
	srv := httptest.NewServer(NewMCPHandler(Direct(b), opts))
	t.Cleanup(srv.Close)
	return srv.URL
}

// post sends one JSON-RPC message and returns the response, decoding an
// SSE body into its first JSON-RPC response.
func post(t *testing.T, ctx context.Context, url, session string, hdr map[string]string, msg string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ""
		}
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"id"`) {
			return resp, data
		}
	}
	return resp, ""
}

const initMsg = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// initMCPSession initializes a Streamable HTTP session and returns its id.
func initMCPSession(t *testing.T, url string) string {
	t.Helper()
	resp, body := post(t, context.Background(), url, "", nil, initMsg)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"protocolVersion"`) {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("Mcp-Session-Id")
	if id == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	resp, _ = post(t, context.Background(), url, id, nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d", resp.StatusCode)
	}
	return id
}

func TestMCPHTTPOriginCheck(t *testing.T) {
	url := httpMCP(t, &FakeBase{}, MCPOptions{AllowedOrigins: []string{"https://App.Example.com/"}})
	tests := []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"http://localhost", true},
		{"http://localhost:6274", true}, // the MCP Inspector's UI
		{"https://LOCALHOST:8443", true},
		{"http://127.0.0.1:3000", true},
		{"http://127.1.2.3", true},
		{"http://[::1]:8080", true},
		{"https://app.example.com", true},
		{"https://evil.example", false},
		{"http://localhost.evil.example", false},
		{"https://app.example.com.evil.example", false},
		{"http://app.example.com", false}, // scheme matters
		{"null", false},
		{"file://", false},
		{"http://192.168.1.10", false},
		{"http://0.0.0.0:8080", false},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.origin != "" {
				hdr["Origin"] = tt.origin
			}
			resp, body := post(t, context.Background(), url, "", hdr, initMsg)
			if got := resp.StatusCode != http.StatusForbidden; got != tt.ok {
				t.Errorf("status %d (%s), want allowed=%v", resp.StatusCode, body, tt.ok)
			}
			if tt.ok && resp.StatusCode != http.StatusOK {
				t.Errorf("allowed origin got status %d: %s", resp.StatusCode, body)
			}
		})
	}
}

func TestMCPHTTPClient(t *testing.T) {
	url := httpMCP(t, &FakeBase{}, MCPOptions{})
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, out := call(t, cs, "execute", map[string]any{"command": "echo", "args": []string{"over", "http"}})
	if res.IsError || out.Stdout != "echo over http\n" {
		t.Errorf("isError %v, stdout %q", res.IsError, out.Stdout)
	}
}

func TestMCPHTTPUnknownMethod(t *testing.T) {
	url := httpMCP(t, &FakeBase{}, MCPOptions{})
	id := initMCPSession(t, url)
	for _, tt := range []struct{ name, session, msg string }{
		{"in a session", id, `{"jsonrpc":"2.0","id":7,"method":"no/such/method","params":{}}`},
		{"before initialize", "", `{"jsonrpc":"2.0","id":7,"method":"no/such/method","params":{}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, context.Background(), url, tt.session, nil, tt.msg)
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("content type %q, body %q: want a JSON-RPC error", ct, body)
			}
			msg, err := jsonrpc.DecodeMessage([]byte(body))
			if err != nil {
				t.Fatalf("decode %q: %v", body, err)
			}
			r, ok := msg.(*jsonrpc.Response)
			if !ok || r.ID.Raw() != int64(7) {
				t.Fatalf("response %#v, want one for id 7", msg)
			}
			checkMethodNotFound(t, r)
		})
	}
	// Transport-level errors stay as the SDK writes them.
	resp, _ := post(t, context.Background(), url, "", map[string]string{"Accept": "application/json"}, initMsg)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad Accept header: status %d, want 400", resp.StatusCode)
	}
}

func TestMCPHTTPDisconnectKillsRun(t *testing.T) {
	b := NewGate()
	url := httpMCP(t, b, MCPOptions{})
	id := initMCPSession(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, ctx, url, id, map[string]string{postIDHeader: "forged"},
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1000"}}}`)
	}()
	Recv(t, b.Entered, "the run to start")
	cancel() // the client hangs up without notifications/cancelled
	if err := Recv(t, b.Ended, "the runner's ctx to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("runner ended with %v, want context.Canceled", err)
	}
	<-done
	// The session survives its client's hang-up.
	b.Open()
	resp, body := post(t, context.Background(), url, id, nil,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"exit_code":0`) || strings.Contains(body, `"isError":true`) {
		t.Errorf("call after disconnect: %d %s", resp.StatusCode, body)
	}
}

func TestMCPHTTPRequestLimits(t *testing.T) {
	url := httpMCP(t, &FakeBase{}, MCPOptions{})
	t.Run("oversized body", func(t *testing.T) {
		big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", mcp.DefaultMaxRequestBodyBytes) + `"}}`
		resp, _ := post(t, context.Background(), url, "", nil, big)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("status %d, want 413", resp.StatusCode)
		}
	})
	t.Run("DNS rebinding Host", func(t *testing.T) {
		// The SDK's own check, kept on: a loopback server reached under
		// another name.
		resp, _ := post(t, context.Background(), url, "", map[string]string{"Host": "evil.example"}, initMsg)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("status %d, want 403", resp.StatusCode)
		}
	})
}

// requestRunner is a run.Runner that hands each request to fn, and refuses
// background starts.
type requestRunner func(ctx context.Context, req run.Request) (*box.Result, error)

func (f requestRunner) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	return f(ctx, req)
}

func (requestRunner) Start(context.Context, run.Request) (string, error) { return "", ErrNoSessions }

func TestMCPHTTPRunContextIsTheCallsRequest(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	f := requestRunner(func(ctx context.Context, req run.Request) (*box.Result, error) {
		mu.Lock()
		seen = append(seen, req.RequestID)
		mu.Unlock()
		return &box.Result{}, nil
	})
	h := NewMCPHandler(f, MCPOptions{})
	// Stands in for the daemon's middleware, which puts the caller and
	// the request's id into the request's context for the audit log.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := withRequestID(withCaller(r.Context(), caller.FromToken("alice")), r.Header.Get("X-Request"))
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	id := initMCPSession(t, srv.URL) // opened without X-Request
	for i, rid := range []string{"r1", "r2"} {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`, 10+i)
		if resp, body := post(t, context.Background(), srv.URL, id, map[string]string{"X-Request": rid}, msg); resp.StatusCode != http.StatusOK {
			t.Fatalf("call: %d %s", resp.StatusCode, body)
		}
	}
	if !slices.Equal(seen, []string{"r1", "r2"}) {
		t.Errorf("runner saw requests %q, want each call's own", seen)
	}
}
