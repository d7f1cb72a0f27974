package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/server"
)

// TestMCPStdioChain: `jaild mcp` runs its calls through the daemon's chain:
// the flags' limits are enforced as maxima and every call, with the bash
// tool's description, is in the audit log.
func TestMCPStdioChain(t *testing.T) {
	in := newInstall(t)
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	cmd := exec.Command(jaildBin, "mcp", "--state-dir", in.StateDir, "--cgroup-parent", in.Parent,
		"--pool", "0", "--mcp-max-output", "2000", "--memory", "64M", "--audit-log", auditPath)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()

	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{
		"command": "seq 1 100000", "description": "count to a lot"}})
	if err != nil || res.IsError {
		t.Fatalf("bash: %v %+v", err, res)
	}
	var out server.RunOutput
	data, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(data, &out)
	if len(out.Stdout) > 2000 || !out.StdoutTruncated {
		t.Errorf("stdout of %d bytes, truncated %v: --mcp-max-output 2000 not applied", len(out.Stdout), out.StdoutTruncated)
	}
	if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "execute", Arguments: map[string]any{"command": "true"}}); err != nil {
		t.Fatal(err)
	}
	session.Close()
	cmd.Wait()

	log, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2:\n%s", len(lines), log)
	}
	var rec api.AuditRecord
	if err := json.Unmarshal(lines[0], &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Verdict != api.VerdictOK || rec.Description != "count to a lot" || rec.Limits.MaxOutputBytes != server.MCPCaptureBytes(2000) ||
		rec.Limits.MemoryBytes != 64<<20 || rec.Caller == "" || rec.SandboxID == "" {
		t.Errorf("audit record %s", lines[0])
	}
}
