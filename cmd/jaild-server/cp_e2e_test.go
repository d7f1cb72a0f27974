package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// startServe starts a real `jaild serve` on a private installation with a
// token and the extra arguments, and returns its base URL and a client
// environment for the CLI. It is stopped at cleanup.
func startServe(t *testing.T, bin string, extra ...string) (base, token string, cliEnv []string) {
	t.Helper()
	in := testenv.New(t, "jaild-server-e2e")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "JAILD_STATE_DIR=" + in.StateDir, "JAILD_CGROUP_PARENT=" + in.Parent}
	tokens, token := testenv.TokenFile(t, "agent")
	base = serveWith(t, bin, env, append([]string{"--token-file", tokens}, extra...)...)
	return base, token, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "JAILD_SERVER=" + base, "JAILD_TOKEN_FILE=" + tokens}
}

// serveWith starts `jaild serve` on a loopback port with the environment
// env (an installation's) and args, logs its lines, and returns its base
// URL once it listens. It is stopped at cleanup.
func serveWith(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--pool", "0",
		"--audit-log", "off", "--log-format", "json"}, args...)...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "listening" {
				select {
				case addr <- m.Addr:
				default:
				}
			}
			t.Logf("jaild: %s", sc.Bytes())
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Error("jaild serve did not stop on SIGTERM; killing it")
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-exited:
		t.Fatalf("jaild serve exited: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("jaild serve did not listen")
	}
	return ""
}

// e2eJaild skips t with -short or without root, and builds jaild and
// jaild-server into a temporary dir; it returns jaild's path.
func e2eJaild(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	bin, err := testenv.BuildJaild(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestCpKeepsModeAndTime: `jaild cp` keeps files' modes (an executable
// stays one) and modification times to the nanosecond, both ways, for a
// file and for a directory (a tar), so that make sees no clock skew.
func TestCpKeepsModeAndTime(t *testing.T) {
	bin := e2eJaild(t)
	base, token, env := startServe(t, bin)
	post := func(path, body string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return string(data)
	}
	var s api.Session
	if err := json.Unmarshal([]byte(post("/sessions", "{}")), &s); err != nil || s.ID == "" {
		t.Fatalf("create session: %v %+v", err, s)
	}
	cp := func(args ...string) {
		t.Helper()
		c := exec.Command(bin, append([]string{"cp"}, args...)...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("jaild cp %v: %v %s", args, err, out)
		}
	}
	local := t.TempDir()
	files := []struct {
		name string
		mode os.FileMode
		time time.Time
	}{
		{"tool", 0o755, time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)},
		{"proj/data", 0o640, time.Date(2021, 6, 7, 8, 9, 10, 987654321, time.UTC)},
		{"proj/bin/run", 0o700, time.Date(2022, 2, 3, 4, 5, 6, 1, time.UTC)},
	}
	for _, f := range files {
		p := filepath.Join(local, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.name), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, f.time, f.time); err != nil {
			t.Fatal(err)
		}
	}
	cp(filepath.Join(local, "tool"), s.ID+":/work/")
	cp(filepath.Join(local, "proj"), s.ID+":/work/proj")
	// In the session, as its sandboxes see them.
	var res api.Response
	out := post("/run", `{"command":"stat -c '%n %a %.9Y' tool proj/data proj/bin/run","session_id":"`+s.ID+`"}`)
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("run: %s", out)
	}
	for _, f := range files {
		want := fmt.Sprintf("%s %o %d.%09d", f.name, f.mode, f.time.Unix(), f.time.Nanosecond())
		if !strings.Contains(res.Stdout, want+"\n") {
			t.Errorf("in the session: %q, want a line %q", res.Stdout, want)
		}
	}
	down := t.TempDir()
	cp(s.ID+":/work/tool", down)
	cp(s.ID+":/work/proj", filepath.Join(down, "proj"))
	for _, f := range files {
		st, err := os.Stat(filepath.Join(down, f.name))
		if err != nil {
			out, _ := exec.Command("find", down, "-ls").CombinedOutput()
			t.Fatalf("%v; downloaded:\n%s", err, out)
		}
		if st.Mode().Perm() != f.mode || !st.ModTime().Equal(f.time) {
			t.Errorf("downloaded %s: %v %v, want %v %v", f.name, st.Mode().Perm(), st.ModTime().UTC(), f.mode, f.time)
		}
	}
}
