package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// fakeJail makes fake workspaces: a front-end double of the worker's. A
// workspace's run answers which workspace ran it; a script with "block"
// in it runs until it is cancelled.
type fakeJail struct {
	mu     sync.Mutex
	n      int
	open   map[string]bool
	tmpDir func() string
	lost   chan struct{} // every workspace's Lost
}

func (j *fakeJail) NewWorkspace(_ context.Context, size int64, proxy bool, _ *box.Limits) (session.Workspace, error) {
	if proxy {
		return nil, errors.New("fakeJail: no proxy listeners")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.n++
	id := "ws" + string(rune('0'+j.n))
	j.open[id] = true
	return &fakeWorkspace{j: j, id: id, dir: j.tmpDir()}, nil
}

func (j *fakeJail) openWorkspaces() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.open)
}

type fakeWorkspace struct {
	j       *fakeJail
	id, dir string
}

func (w *fakeWorkspace) Dir() string                     { return w.dir }
func (w *fakeWorkspace) HostIDs() (uid, gid int)         { return 1, 1 }
func (w *fakeWorkspace) Size() int64                     { return 1 << 20 }
func (w *fakeWorkspace) Used() (int64, error)            { return 0, nil }
func (w *fakeWorkspace) TakeProxyListener() net.Listener { return nil }
func (w *fakeWorkspace) Lost() <-chan struct{} {
	w.j.mu.Lock()
	defer w.j.mu.Unlock()
	return w.j.lost
}
func (w *fakeWorkspace) Close() error {
	w.j.mu.Lock()
	defer w.j.mu.Unlock()
	delete(w.j.open, w.id)
	return nil
}

func (w *fakeWorkspace) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	if strings.Contains(strings.Join(spec.Args, " "), "block") {
		if spec.Stdout != nil {
			spec.Stdout.Write([]byte("started\n"))
		}
		<-ctx.Done()
		return &box.Result{ExitCode: -1, Signal: "SIGKILL", Canceled: true}, ctx.Err()
	}
	return &box.Result{Stdout: "ran in " + w.id + "\n"}, nil
}

// sessionServer is an MCP server with sessions over fake workspaces, and
// what it runs on.
// fakeSessions returns a session manager over fake workspaces, closed
// when t ends, and the run chain that runs its sessions' calls.
func fakeSessions(t *testing.T, cfg session.Config) (*fakeJail, *session.Manager, run.Runner) {
	t.Helper()
	j := &fakeJail{open: map[string]bool{}, tmpDir: t.TempDir}
	m, err := session.New(j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	r, err := run.Chain(&FakeBase{}, run.ChainOptions{Sessions: m})
	if err != nil {
		t.Fatal(err)
	}
	return j, m, r
}

type sessionServer struct {
	srv  *mcp.Server
	jail *fakeJail
	m    *session.Manager
}

func newSessionServer(t *testing.T) *sessionServer {
	t.Helper()
	j, m, r := fakeSessions(t, session.Config{})
	return &sessionServer{srv: NewMCPServer(r, MCPOptions{Sessions: &run.Sessions{Manager: m}}), jail: j, m: m}
}

// connect opens an MCP session on s over in-memory transports; closing
// it waits for the server's side to end.
func (s *sessionServer) connect(t *testing.T) (cs *mcp.ClientSession, closeIt func()) {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeIt = func() { once.Do(func() { cs.Close(); ss.Wait() }) }
	t.Cleanup(closeIt)
	return cs, closeIt
}

// TestMCPSessions: the calls of one MCP session share a jaild session,
// another MCP session gets its own, and closing an MCP session removes
// its jaild session and workspace.
func TestMCPSessions(t *testing.T) {
	s := newSessionServer(t)
	a, closeA := s.connect(t)
	b, _ := s.connect(t)
	_, out := call(t, a, "bash", map[string]any{"command": "echo 1"})
	_, out2 := call(t, a, "execute", map[string]any{"command": "true"})
	_, out3 := call(t, b, "bash", map[string]any{"command": "echo 1"})
	if out.Stdout != "ran in ws1\n" || out2.Stdout != "ran in ws1\n" || out3.Stdout != "ran in ws2\n" {
		t.Errorf("workspaces: a %q, %q; b %q", out.Stdout, out2.Stdout, out3.Stdout)
	}
	if n := len(s.m.List(caller.ID{Kind: caller.Local})); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
	closeA()
	waitFor(t, "a's session to be removed", func() bool { return s.jail.openWorkspaces() == 1 })
	if n := len(s.m.List(caller.ID{Kind: caller.Local})); n != 1 {
		t.Errorf("%d sessions after closing a, want 1", n)
	}
}

// TestMCPTasks: bash run_in_background starts a task that task_output,
// list_tasks and kill_task follow.
func TestMCPTasks(t *testing.T) {
	s := newSessionServer(t)
	cs, _ := s.connect(t)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if schema, _ := json.Marshal(tool.InputSchema); tool.Name == "bash" && !strings.Contains(string(schema), `"run_in_background"`) {
			t.Errorf("bash schema without run_in_background: %s", schema)
		}
	}
	if got := strings.Join(names, ","); got != "bash,execute,kill_task,list_tasks,task_output" {
		t.Errorf("tools %s", got)
	}
	res, out := call(t, cs, "bash", map[string]any{"command": "block", "run_in_background": true})
	if res.IsError || out.TaskID == "" || !strings.Contains(text(res), out.TaskID) {
		t.Fatalf("background bash: %s, %+v", text(res), out)
	}
	var task TaskOutput
	waitFor(t, "the task's output", func() bool {
		task = taskCall(t, cs, "task_output", map[string]any{"task_id": out.TaskID, "block": false})
		return task.Stdout != "" || task.State != "running"
	})
	if task.State != "running" || task.Stdout != "started\n" {
		t.Errorf("task_output: %+v", task)
	}
	// Blocking with a short timeout returns it still running.
	if task = taskCall(t, cs, "task_output", map[string]any{"task_id": out.TaskID, "timeout": 50}); task.State != "running" {
		t.Errorf("task_output with timeout: %+v", task)
	}
	var list TaskList
	lres, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_tasks", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	structured(t, lres, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != out.TaskID {
		t.Errorf("list_tasks: %+v", list)
	}
	task = taskCall(t, cs, "kill_task", map[string]any{"task_id": out.TaskID})
	if task.State != "exited" || task.Verdict == nil || !task.Verdict.Canceled {
		t.Errorf("kill_task: %+v", task)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_output", Arguments: map[string]any{"task_id": "nope"}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "no such task") {
		t.Errorf("unknown task: %v, %+v", err, res)
	}
}

// TestMCPNoSessions: without sessions the task tools are absent and
// run_in_background is a tool error.
func TestMCPNoSessions(t *testing.T) {
	cs := connect(t, &FakeBase{}, MCPOptions{}, nil)
	res, _ := call(t, cs, "bash", map[string]any{"command": "true", "run_in_background": true})
	if !res.IsError || !strings.Contains(text(res), "run_in_background") {
		t.Errorf("background without sessions: %s", text(res))
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if strings.Contains(tool.Name, "task") {
			t.Errorf("tool %s without sessions", tool.Name)
		}
	}
}

func taskCall(t *testing.T, cs *mcp.ClientSession, tool string, args any) TaskOutput {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", tool, text(res))
	}
	var out TaskOutput
	structured(t, res, &out)
	return out
}

func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestSessionEndpoints: the session endpoints over fake workspaces:
// create, patch the environment, list, a lost workspace's 404, delete.
func TestSessionEndpoints(t *testing.T) {
	j, m, r := fakeSessions(t, session.Config{})
	// The files handler sees the caller's session and the path.
	files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok := session.FromContext(r.Context())
		if !ok {
			http.Error(w, "no session", 500)
			return
		}
		io.WriteString(w, sess.Dir()+" "+r.PathValue("path"))
	})
	srv, err := New(Options{Runner: r, Sessions: m, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	do := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %s", method, path, data)
			}
		}
		return resp.StatusCode
	}
	var s api.Session
	if code := do("POST", "/sessions", `{"env":{"A":"1","B":"2"},"cwd":"/work/x","ttl_seconds":60}`, &s); code != 201 || s.Cwd != "/work/x" || s.TTLSeconds != 60 {
		t.Fatalf("create: %d %+v", code, s)
	}
	var e api.ErrorResponse
	var patched api.Session
	if code := do("PATCH", "/sessions/"+s.ID, `{"env":{"A":null,"C":"3"}}`, &patched); code != 200 || len(patched.Env) != 2 || patched.Env["B"] != "2" || patched.Env["C"] != "3" {
		t.Errorf("patch: %d %+v", code, patched.Env)
	}
	if code := do("PATCH", "/sessions/"+s.ID, `{"env":{"A=":"x"}}`, &e); code != 400 || e.Field != "env" {
		t.Errorf("bad patch: %d %+v", code, e)
	}
	for path, want := range map[string]string{"/files/a/b.txt": " a/b.txt", "/files": " ", "/files/": " "} {
		resp, err := http.Get(ts.URL + "/sessions/" + s.ID + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(body), want) || !strings.HasPrefix(string(body), "/") {
			t.Errorf("files %s: %d %q", path, resp.StatusCode, body)
		}
	}
	if code := do("GET", "/sessions/nope/files/a", "", &e); code != 404 {
		t.Errorf("files of no session: %d", code)
	}
	var list api.SessionList
	if do("GET", "/sessions", "", &list); len(list.Sessions) != 1 || list.Sessions[0].ID != s.ID {
		t.Errorf("list: %+v", list)
	}
	var res api.Response
	if code := do("POST", "/run", `{"command":"true","session_id":"`+s.ID+`"}`, &res); code != 200 || res.Stdout != "ran in ws1\n" {
		t.Errorf("run in the session: %d %+v", code, res)
	}
	if code := do("DELETE", "/sessions/"+s.ID, "", nil); code != 204 || j.openWorkspaces() != 0 {
		t.Errorf("delete: %d, %d workspaces open", code, j.openWorkspaces())
	}
	if code := do("DELETE", "/sessions/"+s.ID, "", &e); code != 404 || e.Code != api.CodeNotFound {
		t.Errorf("second delete: %d %+v", code, e)
	}
	// A workspace lost with its worker: the session is removed, and the
	// next use says so.
	do("POST", "/sessions", `{}`, &s)
	j.mu.Lock()
	j.lost = make(chan struct{})
	close(j.lost)
	j.mu.Unlock()
	if code := do("POST", "/run", `{"command":"true","session_id":"`+s.ID+`"}`, &e); code != 404 || !strings.Contains(e.Error, "was lost") {
		t.Errorf("run in a lost session: %d %+v", code, e)
	}
	if code := do("GET", "/sessions/"+s.ID, "", &e); code != 404 || j.openWorkspaces() != 0 {
		t.Errorf("lost session: %d, %d workspaces open", code, j.openWorkspaces())
	}
}

// TestMCPSessionOwner: an MCP session's jaild session is its first
// caller's; another caller on the same MCP session gets none of it.
func TestMCPSessionOwner(t *testing.T) {
	j := &fakeJail{open: map[string]bool{}, tmpDir: t.TempDir}
	m, err := session.New(j, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	srv, tools := newMCPServer(Direct(&FakeBase{}), MCPOptions{Sessions: &run.Sessions{Manager: m}}.withDefaults(), nil)
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait(); tools.sess.wait() })

	me := caller.FromUID(1000)
	id, owner, err := tools.sess.get(ctx, ss, me)
	if err != nil || owner != me {
		t.Fatalf("get: %q %v %v", id, owner, err)
	}
	if id2, _, err := tools.sess.get(ctx, ss, caller.FromUID(1000)); err != nil || id2 != id {
		t.Errorf("the same uid again: %q, %v; want %q", id2, err, id)
	}
	for _, other := range []caller.ID{caller.FromUID(0), caller.FromToken("bob"), caller.FromAddr("127.0.0.1"), {}} {
		if _, _, err := tools.sess.get(ctx, ss, other); !errors.Is(err, box.ErrNotFound) {
			t.Errorf("%#v: %v, want ErrNoSession", other, err)
		}
		if _, err := tools.sess.lookup(ss, other); !errors.Is(err, box.ErrNotFound) {
			t.Errorf("%#v's lookup: %v", other, err)
		}
	}
	if sess, err := tools.sess.lookup(ss, me); err != nil || sess.ID() != id {
		t.Errorf("owner's lookup: %v", err)
	}
}
