package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// unixServer serves srv on a unix socket that every uid may connect to,
// until the end of the test, and returns the socket's path.
func unixServer(t *testing.T, srv *Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jaild-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "jaild.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		Recv(t, done, "Serve to return")
	})
	return sock
}

// unixClient sends requests over a unix socket from a curl running as
// uid, so that the daemon learns the uid from the kernel (SO_PEERCRED).
type unixClient struct {
	sock     string
	uid, gid uint32
}

// do sends one request and decodes the answer into out (if not nil).
func (c unixClient) do(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	args := []string{"-sS", "--max-time", strconv.Itoa(int(2 * TestPatience.Seconds())),
		"--unix-socket", c.sock, "-X", method, "-w", "\n%{http_code}"}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
	}
	cmd := exec.Command("curl", append(args, "http://jaild"+path)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid}}
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("uid %d: %s %s: %v", c.uid, method, path, err)
	}
	text := string(data)
	i := strings.LastIndexByte(text, '\n')
	code, err := strconv.Atoi(text[i+1:])
	if err != nil {
		t.Fatalf("uid %d: %s %s: %q", c.uid, method, path, data)
	}
	if out != nil && code < 300 && code != 204 {
		if err := json.Unmarshal([]byte(text[:i]), out); err != nil {
			t.Fatalf("uid %d: %s %s: %d %q", c.uid, method, path, code, text[:i])
		}
	}
	return code
}

// TestUnixCallersOwnTheirSessions: two uids on the daemon's unix socket
// are two callers: neither lists, reads, patches, runs in, reads or kills
// the jobs of, reads the files of or deletes the other's session, and each
// has its own quota of sessions.
func TestUnixCallersOwnTheirSessions(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to connect as another uid")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	_, m, r := fakeSessions(t, session.Config{MaxPerOwner: 1})
	srv, err := New(Options{Runner: r, Sessions: m, Files: okHandler{}})
	if err != nil {
		t.Fatal(err)
	}
	sock := unixServer(t, srv)
	root := unixClient{sock: sock, uid: 0, gid: 0}
	nobody := unixClient{sock: sock, uid: 65534, gid: 65534}

	var mine api.Session
	if code := root.do(t, "POST", "/sessions", `{}`, &mine); code != 201 {
		t.Fatalf("root creates a session: %d", code)
	}
	var job api.JobAccepted
	if code := root.do(t, "POST", "/run", `{"command":"block","session_id":"`+mine.ID+`","run_in_background":true}`, &job); code != 202 {
		t.Fatalf("root starts a job: %d", code)
	}
	var list api.SessionList
	if code := nobody.do(t, "GET", "/sessions", "", &list); code != 200 || len(list.Sessions) != 0 {
		t.Errorf("nobody lists %d: %+v", code, list.Sessions)
	}
	for _, tt := range []struct{ name, method, path, body string }{
		{"get", "GET", "/sessions/" + mine.ID, ""},
		{"patch", "PATCH", "/sessions/" + mine.ID, `{"env":{"X":"1"}}`},
		{"jobs", "GET", "/sessions/" + mine.ID + "/jobs", ""},
		{"job", "GET", "/sessions/" + mine.ID + "/jobs/" + job.JobID, ""},
		{"kill job", "DELETE", "/sessions/" + mine.ID + "/jobs/" + job.JobID, ""},
		{"files", "GET", "/sessions/" + mine.ID + "/files/x", ""},
		{"run", "POST", "/run", `{"command":"true","session_id":"` + mine.ID + `"}`},
		{"raw", "POST", "/raw", `{"command":"true","session_id":"` + mine.ID + `"}`},
		{"delete", "DELETE", "/sessions/" + mine.ID, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code := nobody.do(t, tt.method, tt.path, tt.body, nil); code != 404 {
				t.Errorf("nobody: %s %s: %d, want 404", tt.method, tt.path, code)
			}
		})
	}
	// The session and its job are untouched.
	var st api.Job
	if code := root.do(t, "GET", "/sessions/"+mine.ID+"/jobs/"+job.JobID, "", &st); code != 200 || st.State != "running" {
		t.Errorf("root's job after nobody's tries: %d %+v", code, st)
	}
	// Quotas are per caller: root is at its cap, nobody is not.
	if code := root.do(t, "POST", "/sessions", `{}`, nil); code != 409 {
		t.Errorf("root's second session: %d, want 409", code)
	}
	var theirs api.Session
	if code := nobody.do(t, "POST", "/sessions", `{}`, &theirs); code != 201 {
		t.Errorf("nobody's first session: %d, want 201", code)
	}
	if code := root.do(t, "GET", "/sessions", "", &list); code != 200 || len(list.Sessions) != 1 || list.Sessions[0].ID != mine.ID {
		t.Errorf("root lists %d: %+v", code, list.Sessions)
	}
	if code := root.do(t, "DELETE", "/sessions/"+theirs.ID, "", nil); code != 404 {
		t.Errorf("root deletes nobody's session: %d, want 404", code)
	}
	if code := root.do(t, "DELETE", "/sessions/"+mine.ID, "", nil); code != 204 {
		t.Errorf("root deletes its session: %d", code)
	}
	if code := nobody.do(t, "DELETE", "/sessions/"+theirs.ID, "", nil); code != 204 {
		t.Errorf("nobody deletes its session: %d", code)
	}
}

// okHandler answers 200 to anything: a files API that the session check
// in front of it must keep strangers from.
type okHandler struct{}

func (okHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// TestMCPSessionOfAnotherToken: only the token that opened an MCP session
// may use or close it: another token's GET, POST and DELETE with its
// Mcp-Session-Id are 404, and its workspace survives them.
func TestMCPSessionOfAnotherToken(t *testing.T) {
	j, m, r := fakeSessions(t, session.Config{})
	toks, err := ParseTokens(strings.NewReader("alice:alice-0123456789abcdef\nbob:bob-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	h := NewMCPHandler(r, MCPOptions{Sessions: &run.Sessions{Manager: m}})
	t.Cleanup(func() { h.(*mcpHandler).Close() })
	srv, err := New(Options{Runner: r, Tokens: toks, MCP: h})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	url := ts.URL + "/mcp"
	alice := map[string]string{"Authorization": "Bearer alice-0123456789abcdef"}
	bob := map[string]string{"Authorization": "Bearer bob-0123456789abcdef"}

	resp, body := post(t, context.Background(), url, "", alice, initMsg)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	if resp, _ := post(t, context.Background(), url, id, alice, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d", resp.StatusCode)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}`
	if resp, body := post(t, context.Background(), url, id, alice, call); resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran in ws1") {
		t.Fatalf("alice's call: %d %s", resp.StatusCode, body)
	}
	if j.openWorkspaces() != 1 {
		t.Fatalf("%d workspaces open, want alice's", j.openWorkspaces())
	}

	for _, method := range []string{"DELETE", "GET", "POST"} {
		t.Run("bob "+method, func(t *testing.T) {
			var code int
			if method == "POST" {
				resp, _ := post(t, context.Background(), url, id, bob, call)
				code = resp.StatusCode
			} else {
				code = mcpRequest(t, method, url, id, bob)
			}
			if code != http.StatusNotFound {
				t.Errorf("bob's %s: %d, want 404", method, code)
			}
			if j.openWorkspaces() != 1 {
				t.Errorf("after bob's %s: %d workspaces open, want alice's", method, j.openWorkspaces())
			}
		})
	}
	if resp, body := post(t, context.Background(), url, id, alice, call); resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran in ws1") {
		t.Errorf("alice's call after bob's tries: %d %s", resp.StatusCode, body)
	}
	if code := mcpRequest(t, "DELETE", url, id, alice); code != http.StatusNoContent {
		t.Errorf("alice's DELETE: %d", code)
	}
	waitFor(t, "alice's workspace to be removed", func() bool { return j.openWorkspaces() == 0 })
}

// mcpRequest sends a GET or DELETE on an MCP session and returns the
// status; a GET's event stream is not read.
func mcpRequest(t *testing.T, method, url, session string, hdr map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
