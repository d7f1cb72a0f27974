package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/testenv"
)

// TestMCPEndToEnd drives jaild's MCP front end with the official TypeScript
// MCP clients (scripts/mcp-e2e, pinned in its package-lock.json) over both
// transports: stdio, by spawning `jaild mcp`, and Streamable HTTP, against
// `jaild serve` at /mcp. It builds the binary and runs real sandboxes, so it
// needs root; it installs the clients with `npm ci` if they are missing.
func TestMCPEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the MCP end-to-end test needs node and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed; the MCP end-to-end test needs node and npm")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "scripts", "mcp-e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	if _, err := os.Stat(filepath.Join(dir, "node_modules")); os.IsNotExist(err) {
		// npm ci installs exactly what package-lock.json pins.
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}

	// The jaild processes get a state dir and parent cgroup of their own
	// through the environment; testenv checks at cleanup, after they have
	// all exited, that they left nothing behind.
	install := testenv.New(t, "jaild-mcp-e2e")
	env := append(os.Environ(), install.Env()...)
	bin, err := testenv.BuildJaild(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"mcp", "serve"} {
		if out, err := exec.CommandContext(ctx, bin, sub, "--help").CombinedOutput(); err != nil {
			t.Fatalf("jaild %s is not in the binary (is it registered in cmd/jaild/main.go?): %v\n%s", sub, err, out)
		}
	}
	url, tokenFile := startServe(t, ctx, bin, env, "")
	// A second daemon, with small limits, for the life of MCP sessions'
	// workspaces (e2e.mjs's lifecycle checks), on an installation of its
	// own so that its workspaces can be counted.
	lifeInstall := testenv.New(t, "jaild-mcp-life")
	lifeURL, _ := startServe(t, ctx, bin, append(os.Environ(), lifeInstall.Env()...), tokenFile,
		"--max-sessions-per-caller", "1", "--max-mcp-sessions-per-caller", "2", "--mcp-session-idle", "2s",
		"--session-ttl", "30s", "--session-max-lifetime", "30s")

	host := &agentHost{stateDir: install.StateDir, base: strings.TrimSuffix(url, "/mcp"), tokenFile: tokenFile}
	lifeHost := &agentHost{stateDir: lifeInstall.StateDir, base: strings.TrimSuffix(lifeURL, "/mcp"), tokenFile: tokenFile}
	cmd := exec.CommandContext(ctx, node, "e2e.mjs", "--jaild", bin, "--http", url, "--token-file", tokenFile, "--sync", "--lifecycle", lifeURL)
	cmd.Dir = dir
	cmd.Env = env // passed on to the `jaild mcp` it spawns
	// Sandboxes of a killed run die with their jaild; see startServe.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testLogWriter{t: t, prefix: "stderr: "}
	answers, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var summary string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if q, ok := strings.CutPrefix(line, "SYNC "); ok {
			// e2e.mjs waits for the answer: an agent scenario asks what
			// only the host sees (its workspace, the daemon's sessions).
			answer, h := "ok", host
			if strings.HasPrefix(q, "count ") {
				h = lifeHost
			}
			if err := h.answer(ctx, q); err != nil {
				answer = strings.ReplaceAll(err.Error(), "\n", " ")
			}
			if _, err := io.WriteString(answers, answer+"\n"); err != nil {
				t.Errorf("answering %q: %v", q, err)
			}
			continue
		}
		if strings.Contains(line, " passed, ") {
			summary = line
		}
		if strings.HasPrefix(line, "FAIL ") || strings.HasPrefix(line, "SKIP ") {
			t.Error(line)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("e2e.mjs: %v (%s)", err, summary)
	}
	if summary == "" {
		t.Error("e2e.mjs printed no summary")
	}
}

// agentHost answers the questions of e2e.mjs's agent scenarios about what
// the host sees of an MCP session's jaild session, which that scenario marks
// with a file named MARKER in /work and a working directory /work/MARKER/src.
type agentHost struct {
	stateDir  string // the daemons' state dir, whose workspaces testenv.Workspaces lists
	base      string // jaild serve's URL
	tokenFile string // its token, the e2e.mjs HTTP clients'
	ids       map[string]string
}

// answer answers "present MARKER" (the workspace with MARKER exists, and
// over HTTP jaild serve lists the session whose cwd is in it) and "gone
// MARKER" (both went, once the MCP session closed).
func (h *agentHost) answer(ctx context.Context, q string) error {
	verb, marker, _ := strings.Cut(q, " ")
	if verb == "count" {
		return h.count(ctx, marker)
	}
	if marker == "" || strings.ContainsAny(marker, "/.") {
		return fmt.Errorf("bad question %q", q)
	}
	overHTTP := strings.Contains(marker, "-http-")
	switch verb {
	case "present":
		if ws := h.holding(marker); len(ws) != 1 {
			return fmt.Errorf("%d workspaces of %s hold %s, want 1", len(ws), h.stateDir, marker)
		}
		if !overHTTP {
			return nil
		}
		id, err := h.session(ctx, marker)
		if err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("GET /sessions lists no session in /work/%s", marker)
		}
		if h.ids == nil {
			h.ids = map[string]string{}
		}
		h.ids[marker] = id
		return nil
	case "gone":
		// Removal follows the close (stdin EOF, DELETE) asynchronously.
		deadline := time.Now().Add(time.Minute)
		for {
			ws := h.holding(marker)
			id, err := "", error(nil)
			if overHTTP {
				id, err = h.session(ctx, marker)
			}
			switch {
			case err != nil:
				return err
			case len(ws) == 0 && id == "":
				if overHTTP && h.ids[marker] == "" {
					return fmt.Errorf("no session id was seen for %s", marker)
				}
				if overHTTP {
					if code, err := h.get(ctx, "/sessions/"+h.ids[marker], nil); err != nil || code != 404 {
						return fmt.Errorf("GET /sessions/%s after the close: %d %v, want 404", h.ids[marker], code, err)
					}
				}
				return nil
			case time.Now().After(deadline):
				return fmt.Errorf("a minute after the close: workspaces %v still hold %s, session %q still listed", ws, marker, id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return fmt.Errorf("bad question %q", q)
}

// count waits, for at most a minute, until the daemon has n workspaces:
// as many workspace records (testenv.Workspaces), and its jaild_sessions
// gauge reads n.
func (h *agentHost) count(ctx context.Context, n string) error {
	want, err := strconv.Atoi(n)
	if err != nil {
		return fmt.Errorf("bad count %q", n)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ents := testenv.Workspaces(h.stateDir)
		gauge, err := h.gauge(ctx, "jaild_sessions")
		if err != nil {
			return err
		}
		if len(ents) == want && gauge == float64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after a minute: %d workspaces of %s, jaild_sessions %v; want %d", len(ents), h.stateDir, gauge, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauge reads a metric without labels from the daemon's /metrics.
func (h *agentHost) gauge(ctx context.Context, name string) (float64, error) {
	var text string
	if code, err := h.get(ctx, "/metrics", &text); err != nil || code != 200 {
		return 0, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// holding lists the workspaces that have an entry named marker.
func (h *agentHost) holding(marker string) []string {
	var ws []string
	for _, d := range testenv.Workspaces(h.stateDir) {
		if _, err := os.Lstat(filepath.Join(d, marker)); err == nil {
			ws = append(ws, d)
		}
	}
	return ws
}

// session is the id of the session jaild serve lists for the token whose
// working directory is below /work/marker, or "".
func (h *agentHost) session(ctx context.Context, marker string) (string, error) {
	var list struct {
		Sessions []struct{ ID, Cwd string }
	}
	if code, err := h.get(ctx, "/sessions", &list); err != nil || code != 200 {
		return "", fmt.Errorf("GET /sessions: %d %v", code, err)
	}
	for _, s := range list.Sessions {
		if strings.HasPrefix(s.Cwd, "/work/"+marker+"/") {
			return s.ID, nil
		}
	}
	return "", nil
}

// get sends GET path to jaild serve with the token and decodes a 200's body
// into out (if not nil).
func (h *agentHost) get(ctx context.Context, path string, out any) (int, error) {
	data, err := os.ReadFile(h.tokenFile)
	if err != nil {
		return 0, err
	}
	_, token, _ := strings.Cut(strings.TrimSpace(string(data)), ":")
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if s, ok := out.(*string); ok && resp.StatusCode == 200 {
		b, err := io.ReadAll(resp.Body)
		*s = string(b)
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode == 200 {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// startServe starts `jaild serve` on a free loopback port with args and the
// tokens of tokenFile (empty: a fresh token), waits until it answers, and
// stops it (SIGTERM, so it kills and cleans up its sandboxes) when the test
// ends.
func startServe(t *testing.T, ctx context.Context, bin string, env []string, tokenFile string, args ...string) (url, tokens string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // jaild serve binds it again; a race with another process is unlikely on loopback

	if tokenFile == "" {
		tokenFile = filepath.Join(t.TempDir(), "tokens")
		token := strings.ReplaceAll(rand.Text(), "-", "")
		if err := os.WriteFile(tokenFile, []byte("e2e:"+token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr, "--token-file", tokenFile}, args...)...)
	cmd.Env = env
	cmd.Stdout = &testLogWriter{t: t, prefix: "serve: "}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jaild serve: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	url = "http://" + addr + "/mcp"
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("jaild serve exited before answering: %v", err)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return url, tokenFile
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("jaild serve did not answer on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testLogWriter logs each line written to it, safely after the test ended.
type testLogWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		func() {
			// t.Log panics once the test has finished; a process that
			// outlives it has nothing left to say to it.
			defer func() { _ = recover() }()
			w.t.Log(fmt.Sprint(w.prefix, line))
		}()
	}
	return len(p), nil
}
