package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// The life of MCP sessions' workspaces over Streamable HTTP, with the Go
// SDK's client: a daemon with a token, sessions over fake workspaces, and
// MCP at /mcp.

const aliceToken = "alice-0123456789abcdef"

var alice = caller.FromToken("alice")

type lifeDaemon struct {
	url  string
	jail *fakeJail
	m    *session.Manager
}

func newLifeDaemon(t *testing.T, cfg session.Config, mo MCPOptions) *lifeDaemon {
	t.Helper()
	j := &fakeJail{open: map[string]bool{}, tmpDir: t.TempDir}
	m, err := session.New(j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if n := j.openWorkspaces(); n != 0 {
			t.Errorf("%d workspaces left open", n)
		}
	})
	r, err := run.Chain(&FakeBase{}, run.ChainOptions{Sessions: m})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := ParseTokens(strings.NewReader("alice:" + aliceToken))
	if err != nil {
		t.Fatal(err)
	}
	mo.Sessions = &run.Sessions{Manager: m}
	h := NewMCPHandler(r, mo)
	t.Cleanup(func() { h.(*mcpHandler).Close() })
	srv, err := New(Options{Runner: r, Tokens: toks, MCP: h, Sessions: m, Files: okHandler{}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &lifeDaemon{url: ts.URL, jail: j, m: m}
}

// clientOpts shape an MCP client: stream keeps the event stream open
// between calls (as the SDKs' clients do while they run); noDelete makes
// Close leave without DELETE (as the TypeScript SDK's client.close(), the
// Inspector CLI or a crash do).
type clientOpts struct{ stream, noDelete bool }

// authTransport adds alice's token, and with noDelete answers a DELETE
// itself without sending it.
type authTransport struct{ noDelete bool }

func (a authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if a.noDelete && r.Method == http.MethodDelete {
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r, Header: http.Header{}}, nil
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+aliceToken)
	return http.DefaultTransport.RoundTrip(r)
}

func (d *lifeDaemon) connect(t *testing.T, o clientOpts) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:             d.url + "/mcp",
		HTTPClient:           &http.Client{Transport: authTransport{noDelete: o.noDelete}},
		DisableStandaloneSSE: !o.stream,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// held waits until the session of alice's running in workspace ws is held
// (its expiry is its maximum lifetime): the client's event stream is open.
func (d *lifeDaemon) waitHeld(t *testing.T, n int) {
	t.Helper()
	waitFor(t, "the clients' event streams to hold their workspaces", func() bool {
		held := 0
		for _, in := range d.m.List(alice) {
			if time.Until(in.ExpiresAt) > time.Hour {
				held++
			}
		}
		return held == n
	})
}

// TestMCPHTTPClientsWithoutDelete: clients that leave without DELETE do not
// pile up against the caller's quotas: the 3rd of them, with a quota of 2
// MCP workspaces, evicts the one idle the longest; the caller's HTTP
// sessions count apart (POST /sessions is not refused for them); when every
// MCP workspace is in use, the refusal says what holds them and how to
// free one; and a workspace whose client is connected is not evicted.
func TestMCPHTTPClientsWithoutDelete(t *testing.T) {
	d := newLifeDaemon(t, session.Config{MaxPerOwner: 2, MaxAttachedPerOwner: 2}, MCPOptions{SessionIdle: time.Hour})
	for i := range 5 {
		cs := d.connect(t, clientOpts{stream: true, noDelete: true})
		if res, out := call(t, cs, "bash", map[string]any{"command": "echo hi"}); res.IsError || !strings.HasPrefix(out.Stdout, "ran in ws") {
			t.Fatalf("client %d: %s", i+1, text(res))
		}
		cs.Close()
	}
	if n := d.jail.openWorkspaces(); n != 2 {
		t.Errorf("%d workspaces open after 5 clients left, want the quota's 2", n)
	}
	// HTTP sessions: a quota of their own.
	hdr := map[string]string{"Authorization": "Bearer " + aliceToken}
	for i := range 2 {
		if resp, body := post(t, context.Background(), d.url+"/sessions", "", hdr, `{}`); resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /sessions %d: %d %s", i+1, resp.StatusCode, body)
		}
	}

	resp, body := post(t, context.Background(), d.url+"/sessions", "", hdr, `{}`)
	for _, want := range []string{"alice holds 2 sessions and 2 attached ones", "DELETE /sessions/{id}"} {
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, want) {
			t.Errorf("third POST /sessions: %d %s, does not say %q", resp.StatusCode, body, want)
		}
	}

	// Two connected clients, their event streams open: their workspaces
	// are held, so the idle ones of the clients that left make room.
	a := d.connect(t, clientOpts{stream: true})
	b := d.connect(t, clientOpts{stream: true})
	call(t, a, "bash", map[string]any{"command": "true"})
	call(t, b, "bash", map[string]any{"command": "true"})
	d.waitHeld(t, 2)
	c := d.connect(t, clientOpts{stream: true})
	res, _ := call(t, c, "bash", map[string]any{"command": "true"})
	msg := text(res)
	for _, want := range []string{"caller alice holds its maximum of 2 MCP workspaces", "none is idle", "close MCP sessions", "removed after 1h0m0s"} {
		if !res.IsError || !strings.Contains(msg, want) {
			t.Errorf("third connected client: isError %v, %q does not say %q", res.IsError, msg, want)
		}
	}
	// a's client closes its MCP session (DELETE): c's next call has a
	// place.
	a.Close()
	waitFor(t, "a's workspace to go", func() bool { return d.jail.openWorkspaces() == 3 }) // b's and the 2 HTTP sessions
	if res, out := call(t, c, "bash", map[string]any{"command": "true"}); res.IsError || !strings.HasPrefix(out.Stdout, "ran in ws") {
		t.Errorf("after a's DELETE: %s", text(res))
	}
	if res, _ := call(t, b, "bash", map[string]any{"command": "true"}); res.IsError {
		t.Errorf("b, connected, lost its workspace: %s", text(res))
	}
}

// TestMCPHTTPIdleWorkspace: a workspace is kept while its client's event
// stream is open however long the client thinks; one whose client holds no
// request open is removed after MCPOptions.SessionIdle, and the next call
// says, once, that it expired and its files are gone (it does not run),
// then the one after runs in a fresh workspace.
func TestMCPHTTPIdleWorkspace(t *testing.T) {
	const idle = 300 * time.Millisecond
	d := newLifeDaemon(t, session.Config{TTL: idle, ReapInterval: 20 * time.Millisecond}, MCPOptions{SessionIdle: idle})
	connected := d.connect(t, clientOpts{stream: true})
	if _, out := call(t, connected, "bash", map[string]any{"command": "true"}); out.Stdout != "ran in ws1\n" {
		t.Fatalf("first call: %q", out.Stdout)
	}
	d.waitHeld(t, 1)

	gone := d.connect(t, clientOpts{})
	if _, out := call(t, gone, "bash", map[string]any{"command": "true"}); out.Stdout != "ran in ws2\n" {
		t.Fatalf("first call of the client without a stream: %q", out.Stdout)
	}
	waitFor(t, "the idle workspace to be removed", func() bool { return d.jail.openWorkspaces() == 1 })
	time.Sleep(3 * idle)
	if res, out := call(t, connected, "bash", map[string]any{"command": "true"}); res.IsError || out.Stdout != "ran in ws1\n" {
		t.Errorf("the connected client's workspace after %v: %s %q", 3*idle, text(res), out.Stdout)
	}

	res, out := call(t, gone, "bash", map[string]any{"command": "echo run"})
	msg := text(res)
	for _, want := range []string{"workspace is gone (it expired after 300ms idle)", "files in /work", "ran nothing", "fresh, empty /work"} {
		if !res.IsError || !strings.Contains(msg, want) {
			t.Errorf("call after the expiry: isError %v, %q does not say %q", res.IsError, msg, want)
		}
	}
	if strings.Contains(msg, "command not found") || out.Stdout != "" {
		t.Errorf("call after the expiry: %q, stdout %q", msg, out.Stdout)
	}
	if res, out := call(t, gone, "bash", map[string]any{"command": "true"}); res.IsError || out.Stdout != "ran in ws3\n" {
		t.Errorf("the call after: %s %q, want a fresh workspace", text(res), out.Stdout)
	}
	// The task tools say it too, once.
	waitFor(t, "the idle workspace to be removed again", func() bool { return d.jail.openWorkspaces() == 1 })
	lres, err := gone.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_tasks", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !lres.IsError || !strings.Contains(text(lres), "workspace is gone") {
		t.Errorf("list_tasks after the expiry: %s", text(lres))
	}
}

// TestMCPHTTPSessionEnds: an MCP session's jaild session is removed when
// the client closes it (DELETE) and when the SDK closes it for its idle
// timeout, with no workspace left and the sessions count (the gauge's
// source) back to zero.
func TestMCPHTTPSessionEnds(t *testing.T) {
	d := newLifeDaemon(t, session.Config{}, MCPOptions{SessionTimeout: 300 * time.Millisecond})
	deleted := d.connect(t, clientOpts{stream: true})
	timedOut := d.connect(t, clientOpts{})
	call(t, deleted, "bash", map[string]any{"command": "true"})
	call(t, timedOut, "bash", map[string]any{"command": "true"})
	if n, _ := d.m.Stats(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	deleted.Close()
	waitFor(t, "the workspaces to go", func() bool {
		n, _ := d.m.Stats()
		return d.jail.openWorkspaces() == 0 && n == 0
	})
}
