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
	// Denied: nothing runs, the convention's words.
	res, _ = callTool("run_network_tool", map[string]any{"executable": "rm", "args": []string{"-rf", "/work"}})
	if !res.IsError || textOf(res) != "Command not allowed: rm" {
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

// TestMCPEgressNeedsNoSessions: --mcp-egress with MCP sessions on is a
// usage error at start, not a failure of every egress call later.
func TestMCPEgressNeedsNoSessions(t *testing.T) {
	for _, args := range [][]string{
		{"mcp", "--mcp-egress", "--egress-allow", "x.example:443"},
		{"serve", "--mcp-egress", "--egress-allow", "x.example:443"},
	} {
		cmd := exec.Command(jaildBin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if exitCode(err) != api.ExitUsage || !strings.Contains(string(out), "--mcp-egress needs --mcp-session none") {
			t.Errorf("%v: exit %d:\n%s", args, exitCode(err), out)
		}
	}
}
