package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// lockedBuffer is an audit log's writer that tests read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the audit records written since the last call.
func (b *lockedBuffer) records(t *testing.T) []api.AuditRecord {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var recs []api.AuditRecord
	sc := bufio.NewScanner(&b.buf)
	for sc.Scan() {
		var rec api.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	b.buf.Reset()
	return recs
}

// frontEnds is a daemon over a fake jail and fake workspaces, with its
// audit log: the HTTP server (sessions on) and an MCP server over the same
// chain and maxima.
type frontEnds struct {
	url   string
	mcp   *mcp.ClientSession
	audit *lockedBuffer
	base  *FakeBase
}

func newFrontEnds(t *testing.T, max run.Maxima) *frontEnds {
	t.Helper()
	audit := &lockedBuffer{}
	log := run.NewAuditLog(audit, run.AuditOptions{})
	m, err := session.New(&fakeJail{open: map[string]bool{}, tmpDir: t.TempDir}, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	base := &FakeBase{}
	r, err := run.Chain(base, run.ChainOptions{Max: max, Audit: log, Sessions: m})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Runner: r, Sessions: m, SessionMax: max, Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	cs := connectRunner(t, r, MCPOptions{Max: max, Audit: log, Egress: true, Caller: mcpCaller, Tools: []string{ToolBash, ToolExecute, ToolRunNetworkTool}})
	return &frontEnds{url: ts.URL, mcp: cs, audit: audit, base: base}
}

// mcpCaller names the MCP client of newFrontEnds, whose requests carry no
// caller (as over stdio).
const mcpCaller = "stdio:uid:1234"

// post sends body to path and returns the status and the error answer.
func (f *frontEnds) post(t *testing.T, path, body string) (int, api.ErrorResponse) {
	t.Helper()
	resp, err := http.Post(f.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e api.ErrorResponse
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, e
}

// TestFrontEndsRefuseAlike: the same invalid or over-maximum input, sent
// through POST /run, POST /sessions and an MCP tool call, is refused by the
// same rule with the same field and reason, and each refusal is in the
// audit log.
func TestFrontEndsRefuseAlike(t *testing.T) {
	max := run.Maxima{Limits: box.Limits{Memory: 64 << 20}}
	f := newFrontEnds(t, max)
	tests := []struct {
		name        string
		run, create string // bodies of POST /run and /sessions; "": not a field there
		tool        string
		args        map[string]any // the MCP call's; nil: not an argument there
		want        box.InvalidError
	}{
		{
			name:   "NUL in an env value",
			run:    `{"command":"true","env":{"A":"x\u0000y"}}`,
			create: `{"env":{"A":"x\u0000y"}}`,
			tool:   ToolBash, args: map[string]any{"command": "true", "env": map[string]string{"A": "x\x00y"}},
			want: box.InvalidError{Field: "env", Reason: "value of A contains a NUL byte"},
		},
		{
			name: "NUL in an env value, run_network_tool",
			tool: ToolRunNetworkTool, args: map[string]any{"executable": "true", "env": map[string]string{"A": "x\x00y"}},
			want: box.InvalidError{Field: "env", Reason: "value of A contains a NUL byte"},
		},
		{
			name:   "egress without a proxy",
			run:    `{"command":"true","egress":true}`,
			create: `{"egress":true}`,
			tool:   ToolExecute, args: map[string]any{"command": "true", "egress": true},
			want: box.InvalidError{Field: "egress", Reason: "this daemon gives no network access (the operator has not set --egress-allow)"},
		},
		{
			name:   "memory above the maximum",
			run:    `{"command":"true","memory_bytes":134217728}`,
			create: `{"limits":{"memory_bytes":134217728}}`,
			want:   box.InvalidError{Field: "memory_bytes", Reason: "134217728 bytes exceeds the maximum of 67108864"},
		},
		{
			name: "cwd outside the sandbox's directories",
			run:  `{"command":"true","cwd":"/etc"}`,
			tool: ToolBash, args: map[string]any{"command": "true", "cwd": "/etc"},
			want: box.InvalidError{Field: "cwd", Reason: `"/etc" is outside the sandbox's writable dirs /work and /tmp`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.audit.records(t) // forget earlier ones
			for path, body := range map[string]string{"/run": tt.run, "/sessions": tt.create} {
				if body == "" {
					continue
				}
				status, e := f.post(t, path, body)
				if status != http.StatusBadRequest || e.Code != api.CodeInvalid || e.Field != tt.want.Field || e.Error != tt.want.Error() {
					t.Errorf("POST %s: %d %+v, want 400 %q", path, status, e, tt.want.Error())
				}
				f.wantRefusal(t, "POST "+path, tt.want.Error())
			}
			if tt.args != nil {
				res, err := f.mcp.CallTool(context.Background(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
				if err != nil {
					t.Fatal(err)
				}
				if txt := text(res); !res.IsError || txt != "invalid arguments: "+tt.want.Error() {
					t.Errorf("MCP %s: %q, want %q", tt.tool, txt, "invalid arguments: "+tt.want.Error())
				}
				if rec := f.wantRefusal(t, "MCP "+tt.tool, tt.want.Error()); rec.Caller != mcpCaller {
					t.Errorf("MCP %s: the refusal's caller %q, want %q", tt.tool, rec.Caller, mcpCaller)
				}
			}
			if n := len(f.base.Calls()); n > 0 {
				t.Errorf("the jail ran %d commands", n)
			}
		})
	}
}

// wantRefusal checks that the audit log has one new record, of a refusal
// with msg, and returns it.
func (f *frontEnds) wantRefusal(t *testing.T, what, msg string) api.AuditRecord {
	t.Helper()
	recs := f.audit.records(t)
	if len(recs) != 1 {
		t.Fatalf("%s: %d audit records, want 1: %+v", what, len(recs), recs)
	}
	rec := recs[0]
	verdicts := map[string]bool{api.VerdictInvalid: true, api.VerdictRejected: true}
	if !verdicts[rec.Verdict] || !strings.Contains(rec.Error, msg) {
		t.Errorf("%s: audit record %+v, want a refusal with %q", what, rec, msg)
	}
	return rec
}

// TestSessionRefusalsAudited: every refusal of POST and PATCH /sessions
// is in the audit log, with its action.
func TestSessionRefusalsAudited(t *testing.T) {
	f := newFrontEnds(t, run.Maxima{Limits: box.Limits{Pids: 10}})
	for _, tt := range []struct{ body, field string }{
		{`{"limits":{"pids":11}}`, "pids"},
		{`{"cwd":"/tmp"}`, "cwd"},
		{`{"env":{"1X":"y"}}`, "env"},
	} {
		if status, e := f.post(t, "/sessions", tt.body); status != http.StatusBadRequest || e.Field != tt.field {
			t.Errorf("POST /sessions %s: %d %+v, want invalid %s", tt.body, status, e, tt.field)
		}
		recs := f.audit.records(t)
		if len(recs) != 1 || recs[0].Action != "session.create" || recs[0].Verdict != api.VerdictInvalid {
			t.Errorf("POST /sessions %s: audit %+v, want one session.create refusal", tt.body, recs)
		}
	}
	var s api.Session
	resp, err := http.Post(f.url+"/sessions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPatch, f.url+"/sessions/"+s.ID, strings.NewReader(`{"env":{"A-B":"x"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	recs := f.audit.records(t)
	if resp.StatusCode != http.StatusBadRequest || len(recs) != 1 || recs[0].Action != "session.env" || recs[0].SessionID != s.ID {
		t.Errorf("PATCH: %d, audit %+v, want 400 and one session.env refusal", resp.StatusCode, recs)
	}
}

// TestMCPDefaultsAreTheChains: a tool call asks for no limits and no
// timeout: the chain gives it the operator's, maxima lower than the jail's
// defaults included, and the descriptions say what it gave.
func TestMCPDefaultsAreTheChains(t *testing.T) {
	max := run.Maxima{Limits: box.Limits{Memory: 32 << 20, Pids: 20}, Timeout: 5 * time.Second}
	f := &FakeBase{}
	cs := connect(t, f, MCPOptions{Max: max}, nil)
	res, out := call(t, cs, ToolBash, map[string]any{"command": "true"})
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	calls := f.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d runs", len(calls))
	}
	s := calls[0]
	if s.Limits.Memory != 32<<20 || s.Limits.Pids != 20 || s.Timeout != 5*time.Second {
		t.Errorf("spec limits %+v, timeout %v: want the maxima (32 MiB, 20 pids, 5s)", s.Limits, s.Timeout)
	}
	if out.TimeoutMS != 5000 {
		t.Errorf("timeout_ms = %d, want 5000", out.TimeoutMS)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name != ToolBash {
			continue
		}
		if !strings.Contains(tool.Description, "32 MiB of memory") || !strings.Contains(tool.Description, "default 5000 ms, maximum 5000 ms") {
			t.Errorf("description: %s", tool.Description)
		}
		if d := schemaOf(t, tool.InputSchema).Properties["timeout"].Description; !strings.Contains(d, "Default (or 0): 5000. Maximum 5000") {
			t.Errorf("timeout schema: %s", d)
		}
	}
	// Above the maximum: reduced, and the result says so.
	res, out = call(t, cs, ToolBash, map[string]any{"command": "true", "timeout": 60000})
	if res.IsError || out.TimeoutMS != 5000 || !strings.Contains(text(res), "reduced") || f.Calls()[1].Timeout != 5*time.Second {
		t.Errorf("timeout 60000 with a maximum of 5 s: timeout_ms %d, text %q", out.TimeoutMS, text(res))
	}
}

// TestToolTimeoutOnlyForTools: the chain reduces a timeout above the
// maximum only for an agent tool's call; any other is refused.
func TestToolTimeoutOnlyForTools(t *testing.T) {
	f := &FakeBase{}
	r, err := run.Chain(f, run.ChainOptions{Max: run.Maxima{Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []bool{false, true} {
		req := &run.Request{Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}}}, Tool: tool}
		req.SetTimeout("timeout", 2000, time.Millisecond)
		_, err := r.Run(context.Background(), *req)
		if tool && (err != nil || f.Calls()[0].Timeout != time.Second) {
			t.Errorf("tool call: err %v, calls %+v, want one with a timeout of 1s", err, f.Calls())
		}
		if !tool && (!box.IsInvalid(err) || !strings.Contains(err.Error(), "invalid timeout: 2000 exceeds the maximum of 1000")) {
			t.Errorf("other call: err %v, want timeout refused", err)
		}
	}
}
