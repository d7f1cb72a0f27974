package server

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
)

// connectRunner is connect over a whole runner (a chain) rather than a base.
func connectRunner(t *testing.T, r run.Runner, opts MCPOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewMCPServer(r, opts).Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// callNetworkTool calls run_network_tool and decodes its structured result
// strictly into the convention's keys.
func callNetworkTool(t *testing.T, cs *mcp.ClientSession, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolRunNetworkTool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(run_network_tool, %v): protocol error %v", args, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("structured content %s: %v", b, err)
		}
	}
	return res, out
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// echoStreams answers with the command echoed back, written to the
// spec's Stdout as the jail writes output, and kept in the result.
func echoStreams(ctx context.Context, s *jail.Spec) (*box.Result, error) {
	out := strings.Join(s.Args, " ") + "\n"
	if s.Stdout != nil {
		s.Stdout.Write([]byte(out))
	}
	return &box.Result{ID: "fake", Stdout: out, StdoutBytes: int64(len(out))}, nil
}

// TestNetworkToolListed: run_network_tool is served only when listed, in
// the convention's schema.
func TestNetworkToolListed(t *testing.T) {
	if got := toolNames(t, connect(t, &FakeBase{}, MCPOptions{}, nil)); slices.Contains(got, ToolRunNetworkTool) {
		t.Errorf("default tools %v include run_network_tool", got)
	}
	cs := connect(t, &FakeBase{}, MCPOptions{Tools: []string{ToolRunNetworkTool}}, nil)
	if got := toolNames(t, cs); !slices.Equal(got, []string{ToolRunNetworkTool}) {
		t.Fatalf("tools %v, want only run_network_tool", got)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	in, out := schemaOf(t, res.Tools[0].InputSchema), schemaOf(t, res.Tools[0].OutputSchema)
	if !slices.Equal(in.Required, []string{"executable"}) {
		t.Errorf("required %v, want [executable]", in.Required)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range in.Properties {
			yield(k)
		}
	}); !slices.Equal(got, []string{"args", "cwd", "env", "executable"}) {
		t.Errorf("input properties %v", got)
	}
	for _, p := range []string{"cwd", "env"} {
		if !slices.Contains(in.Properties[p].Types, "null") {
			t.Errorf("%s does not accept null: %v %v", p, in.Properties[p].Type, in.Properties[p].Types)
		}
	}
	for _, p := range []string{"stdout", "stderr", "exitCode"} {
		if _, ok := out.Properties[p]; !ok {
			t.Errorf("output schema lacks %s", p)
		}
	}
	if !slices.Contains(out.Properties["exitCode"].Types, "null") {
		t.Errorf("exitCode is not nullable: %+v", out.Properties["exitCode"])
	}

	for _, tc := range []struct {
		names []string
		ok    bool
	}{
		{[]string{"bash", "execute"}, true},
		{[]string{"bash", "execute", "run_network_tool"}, true},
		{[]string{"bash", "shell"}, false},
		{nil, false},
	} {
		if err := CheckMCPTools(tc.names); (err == nil) != tc.ok {
			t.Errorf("CheckMCPTools(%v) = %v", tc.names, err)
		}
	}
}

// TestNetworkToolCall: a call becomes a run of the executable with its
// args, cwd and env, as front end mcp:run_network_tool; the result has the
// convention's keys and nothing else.
func TestNetworkToolCall(t *testing.T) {
	var got []run.Request
	b := &FakeBase{Fn: echoStreams}
	r := requestRunner(func(ctx context.Context, req run.Request) (*box.Result, error) {
		got = append(got, req)
		return Direct(b).Run(ctx, req)
	})
	cs := connectRunner(t, r, MCPOptions{Tools: []string{ToolRunNetworkTool}})
	res, out := callNetworkTool(t, cs, map[string]any{
		"executable": "curl", "args": []string{"-I", "https://example.com"}, "cwd": "/tmp", "env": map[string]string{"CI": "1"},
	})
	if res.IsError {
		t.Fatalf("isError: %s", text(res))
	}
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			yield(k)
		}
	}); !slices.Equal(keys, []string{"exitCode", "stderr", "stdout"}) {
		t.Errorf("result keys %v, want exactly exitCode, stderr, stdout", keys)
	}
	if out["stdout"] != "curl -I https://example.com\n" || out["exitCode"] != 0.0 || out["stderr"] != "" {
		t.Errorf("result %v", out)
	}
	if len(got) != 1 || got[0].FrontEnd != "mcp:run_network_tool" {
		t.Fatalf("requests %+v", got)
	}
	s := b.Calls()[0]
	if !slices.Equal(s.Args, []string{"curl", "-I", "https://example.com"}) || s.Dir != "/tmp" ||
		!slices.Equal(s.Env, []string{"CI=1"}) || s.MaxOutput != NetworkToolMaxOutput {
		t.Errorf("spec %+v", s.Command)
	}

	// null cwd and env are the defaults.
	if res, out := callNetworkTool(t, cs, map[string]any{"executable": "date", "cwd": nil, "env": nil}); res.IsError || out["stdout"] != "date\n" {
		t.Errorf("null cwd and env: %s", text(res))
	}
	// A bad cwd is a tool error.
	if res, _ := callNetworkTool(t, cs, map[string]any{"executable": "date", "cwd": "/etc"}); !res.IsError || !strings.Contains(text(res), "cwd") {
		t.Errorf("cwd /etc: isError %v %s", res.IsError, text(res))
	}
}

// TestNetworkToolOutput: each stream keeps its first MiB and then says
// ...truncated...; a command killed has a null exitCode; a nonzero exit
// is a result, not a tool error.
func TestNetworkToolOutput(t *testing.T) {
	big := bytes.Repeat([]byte("a"), NetworkToolMaxOutput-1)
	big = append(big, "é and more"...) // the cut falls inside é
	b := &FakeBase{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		switch s.Args[0] {
		case "big":
			// In chunks, as the jail writes.
			for p := big; len(p) > 0; p = p[min(len(p), 4096):] {
				s.Stdout.Write(p[:min(len(p), 4096)])
			}
			s.Stderr.Write([]byte("exactly\n"))
			return &box.Result{ID: "x", ExitCode: 3}, nil
		case "killed":
			s.Stdout.Write([]byte("partial"))
			return &box.Result{ID: "x", ExitCode: -1, Signal: "SIGKILL", TimedOut: true}, nil
		}
		return &box.Result{ID: "x"}, nil
	}}
	cs := connect(t, b, MCPOptions{Tools: []string{ToolRunNetworkTool}}, nil)
	res, out := callNetworkTool(t, cs, map[string]any{"executable": "big"})
	stdout, _ := out["stdout"].(string)
	if res.IsError || out["exitCode"] != 3.0 || out["stderr"] != "exactly\n" {
		t.Errorf("isError %v, exitCode %v, stderr %q", res.IsError, out["exitCode"], out["stderr"])
	}
	if want := string(big[:NetworkToolMaxOutput-1]) + NetworkToolTruncated; stdout != want {
		t.Errorf("stdout: %d bytes ending %q, want %d ending %q", len(stdout), stdout[max(0, len(stdout)-20):], len(want), want[len(want)-20:])
	}
	res, out = callNetworkTool(t, cs, map[string]any{"executable": "killed"})
	if res.IsError || out["exitCode"] != nil || out["stdout"] != "partial" {
		t.Errorf("killed: isError %v, %v", res.IsError, out)
	}
	if _, ok := out["exitCode"]; !ok {
		t.Error("killed: exitCode absent, want null")
	}
}

// TestNetworkToolPolicy: the policy decides run_network_tool calls, with
// the forwarded env as input.env; a denial is a tool error in the
// convention's words and builds nothing.
func TestNetworkToolPolicy(t *testing.T) {
	e, err := policy.Open(policy.Options{Dir: "../examples/policy", NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	b := &FakeBase{Fn: echoStreams}
	r, err := run.Chain(b, run.ChainOptions{Policy: e, Max: run.Maxima{MaxOutput: NetworkToolMaxOutput}})
	if err != nil {
		t.Fatal(err)
	}
	cs := connectRunner(t, r, MCPOptions{Tools: []string{ToolRunNetworkTool}})
	for _, tc := range []struct {
		name  string
		args  map[string]any
		allow bool
		msg   string
	}{
		{"allowed", map[string]any{"executable": "date"}, true, ""},
		{"denied args", map[string]any{"executable": "date", "args": []string{"-u"}}, false, "Command not allowed: date"},
		{"denied command", map[string]any{"executable": "rm", "args": []string{"-rf", "/"}}, false, "Command not allowed: rm"},
		// python's package allows PYTHONUNBUFFERED=1 only.
		{"env allowed", map[string]any{"executable": "python3", "args": []string{"-m", "http.server"}, "env": map[string]string{"PYTHONUNBUFFERED": "1"}}, true, ""},
		{"env denied", map[string]any{"executable": "date", "env": map[string]string{"CI": "1"}}, false, "Command not allowed: date"},
		{"unresolvable", map[string]any{"executable": "no-such-tool"}, false, "Failed to resolve executable path for 'no-such-tool'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(b.Calls())
			res, _ := callNetworkTool(t, cs, tc.args)
			if res.IsError == tc.allow || (!tc.allow && !strings.HasPrefix(text(res), tc.msg)) {
				t.Errorf("isError %v: %s", res.IsError, text(res))
			}
			if built := len(b.Calls()) - n; built != map[bool]int{true: 1, false: 0}[tc.allow] {
				t.Errorf("%d runs reached the jail", built)
			}
		})
	}
}
