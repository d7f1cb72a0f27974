package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/server"
)

// TestMCPNetworkTool: `jaild mcp --mcp-tools bash,run_network_tool` serves
// the policy-runner convention's tool, in real sandboxes, decided by the
// example policy: its 1 MiB cap holds beside the bash tool's cap, which
// MCP_EXEC_MAX_OUTPUT_BYTES sets.
func TestMCPNetworkTool(t *testing.T) {
	in := newInstall(t)
	cmd := exec.Command(jaildBin, "mcp", "--state-dir", in.StateDir, "--cgroup-parent", in.Parent,
		"--pool", "0", "--audit-log", "off", "--mcp-tools", "bash,run_network_tool", "--mcp-session", "none", "--policy-dir", "../../examples/policy")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "MCP_EXEC_MAX_OUTPUT_BYTES=2000"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		session.Close()
		cmd.Wait()
	})
	tools, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "bash,run_network_tool" {
		t.Errorf("tools %v, want bash and run_network_tool", names)
	}

	callTool := func(name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
		t.Helper()
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		var out map[string]any
		data, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(data, &out)
		return res, out
	}
	textOf := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	// Allowed: date, no args.
	res, out := callTool("run_network_tool", map[string]any{"executable": "date"})
	if res.IsError || out["exitCode"] != 0.0 || len(out["stdout"].(string)) < 10 {
		t.Errorf("date: isError %v, %v %s", res.IsError, out, textOf(res))
	}
	// Denied: nothing runs, the convention's words, then the policy's
	// reasons.
	res, _ = callTool("run_network_tool", map[string]any{"executable": "rm", "args": []string{"-rf", "/work"}})
	if !res.IsError || textOf(res) != "Command not allowed: rm\nreason: rm: no package sandbox.rm allows it" {
		t.Errorf("rm: isError %v, %q", res.IsError, textOf(res))
	}
	// More than a MiB of output, from args the example's echo allows:
	// the first MiB and the marker.
	arg := strings.Repeat("x", 120_000)
	args := make([]string, 10)
	for i := range args {
		args[i] = arg
	}
	res, out = callTool("run_network_tool", map[string]any{"executable": "echo", "args": args})
	stdout, _ := out["stdout"].(string)
	if res.IsError || out["exitCode"] != 0.0 || stdout != strings.Join(args, " ")[:server.NetworkToolMaxOutput]+"...truncated..." {
		t.Errorf("echo of 1.2 MB: isError %v, exitCode %v, stdout of %d bytes ending %q", res.IsError, out["exitCode"], len(stdout), stdout[max(0, len(stdout)-20):])
	}
	// The bash tool's cap is MCP_EXEC_MAX_OUTPUT_BYTES's 2000.
	res, out = callTool("bash", map[string]any{"command": "echo " + strings.Repeat("y", 3000)})
	if res.IsError || len(out["stdout"].(string)) > 2000 || out["stdout_truncated"] != true {
		t.Errorf("bash: isError %v, %d bytes of stdout, truncated %v: %s", res.IsError, len(out["stdout"].(string)), out["stdout_truncated"], textOf(res))
	}
}

// TestMCPToolsFlag: a name that is no tool stops serve and mcp at start,
// from the flag or from JAILD_MCP_TOOLS.
func TestMCPToolsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{args: []string{"mcp", "--mcp-tools", "bash,bogus"}},
		{args: []string{"serve", "--mcp-tools", "bogus"}},
		{args: []string{"mcp"}, env: "JAILD_MCP_TOOLS=shell"},
	} {
		cmd := exec.Command(jaildBin, tc.args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", tc.env}
		out, err := cmd.CombinedOutput()
		if exitCode(err) != api.ExitUsage || !strings.Contains(string(out), "--mcp-tools: unknown MCP tool") {
			t.Errorf("%v %s: exit %d:\n%s", tc.args, tc.env, exitCode(err), out)
		}
	}
}

// TestMCPEgressNeedsNoSessions (its name kept from when --mcp-egress
// needed --mcp-session none): with sessions on, --mcp-egress gives the MCP
// session's jaild session egress, so that every bash call of it reaches
// the allowed upstream (and only it), and the tools offer no egress
// argument; with sessions off, the argument is offered.
func TestMCPEgressNeedsNoSessions(t *testing.T) {
	in := newInstall(t)
	up := helloUpstream(t)
	connect := func(t *testing.T, mode string) *mcp.ClientSession {
		cmd := exec.Command(jaildBin, "mcp", "--state-dir", in.StateDir, "--cgroup-parent", in.Parent,
			"--pool", "0", "--audit-log", "off", "--mcp-session", mode, "--mcp-egress",
			"--egress-allow", "up.test:80", "--egress-resolve", "up.test="+up.Addr.String()+",denied.test="+up.Addr.String())
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t.Cleanup(cancel)
		session, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			session.Close()
			cmd.Wait()
		})
		return session
	}
	hasEgressArg := func(t *testing.T, s *mcp.ClientSession) bool {
		tools, err := s.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			if tool.Name == "bash" {
				data, _ := json.Marshal(tool.InputSchema)
				return strings.Contains(string(data), `"egress"`)
			}
		}
		t.Fatal("no bash tool")
		return false
	}
	t.Run("sessions", func(t *testing.T) {
		s := connect(t, "auto")
		if hasEgressArg(t, s) {
			t.Error("with sessions, bash offers an egress argument")
		}
		for _, cmd := range []string{
			"curl -sS http://up.test/one; cd /work; echo kept > f",
			"cat /work/f; curl -s -o /dev/null -w '%{http_code}\\n' http://denied.test/; curl -sS http://up.test/two",
		} {
			res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": cmd}})
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Stdout string `json:"stdout"`
			}
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &out)
			want := "hello from upstream host=up.test\n"
			if strings.Contains(cmd, "cat") {
				want = "kept\n403\nhello from upstream host=up.test\n"
			}
			if res.IsError || out.Stdout != want {
				t.Errorf("%q: isError %v, stdout %q, want %q", cmd, res.IsError, out.Stdout, want)
			}
		}
	})
	t.Run("one-shot", func(t *testing.T) {
		if !hasEgressArg(t, connect(t, "none")) {
			t.Error("without sessions, bash offers no egress argument")
		}
	})
}
