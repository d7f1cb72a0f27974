package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	env := append(os.Environ(), testenv.New(t, "jaild-mcp-e2e").Env()...)
	bin, err := testenv.BuildJaild(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"mcp", "serve"} {
		if out, err := exec.CommandContext(ctx, bin, sub, "--help").CombinedOutput(); err != nil {
			t.Fatalf("jaild %s is not in the binary (is it registered in cmd/jaild/main.go?): %v\n%s", sub, err, out)
		}
	}
	url, tokenFile := startServe(t, ctx, bin, env)

	cmd := exec.CommandContext(ctx, node, "e2e.mjs", "--jaild", bin, "--http", url, "--token-file", tokenFile)
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
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var summary string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
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

// startServe starts `jaild serve` on a free loopback port with a fresh
// token, waits until it answers, and stops it (SIGTERM, so it kills and
// cleans up its sandboxes) when the test ends.
func startServe(t *testing.T, ctx context.Context, bin string, env []string) (url, tokenFile string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // jaild serve binds it again; a race with another process is unlikely on loopback

	tokenFile = filepath.Join(t.TempDir(), "tokens")
	token := strings.ReplaceAll(rand.Text(), "-", "")
	if err := os.WriteFile(tokenFile, []byte("e2e:"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--listen", addr, "--token-file", tokenFile)
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
