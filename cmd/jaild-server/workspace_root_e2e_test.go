package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// TestWorkspaceRootDaemon: a real `jaild serve` told the workspace root by
// MCP_BASH_ROOT_DIR (the seed's name) mounts each session's workspace
// there; the files API and the session's runs see the same /work; ending
// the session removes it. A root another user could write is a start-up
// error (exit 125) that names it, whether given by --workdir or
// --workspace-root.
func TestWorkspaceRootDaemon(t *testing.T) {
	bin := e2eJaild(t)
	in := testenv.New(t, "jaild-server-wsroot")
	root := in.WithWorkspaceRoot(t)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "JAILD_STATE_DIR=" + in.StateDir, "JAILD_CGROUP_PARENT=" + in.Parent}

	t.Run("refused", func(t *testing.T) {
		open := filepath.Join(root, "open")
		if err := os.Mkdir(open, 0o777); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(open)
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"--workdir", "--workspace-root"} {
			cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--pool", "0", flag, open)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != api.ExitUsage || !strings.Contains(string(out), "workspace root "+open+" is writable by group or others") {
				t.Errorf("serve %s %s: %v, output %q; want exit %d naming the root", flag, open, err, out, api.ExitUsage)
			}
		}
	})

	tokens, token := testenv.TokenFile(t, "agent")
	base := serveWith(t, bin, append(env, "MCP_BASH_ROOT_DIR="+root), "--token-file", tokens, "--workspace-size", "16M")
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if strings.HasPrefix(body, "{") {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}

	code, body := do("POST", "/sessions", "{}")
	var s api.Session
	if code != 201 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("create session: %d %s", code, body)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 || len(testenv.MountsUnder(root)) != 1 {
		t.Fatalf("the root holds %v, mounts %v; want the session's workspace", ents, testenv.MountsUnder(root))
	}
	ws := filepath.Join(root, ents[0].Name())
	if code, body := do("PUT", "/sessions/"+s.ID+"/files/up.txt", "uploaded\n"); code != 204 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	code, body = do("POST", "/run", `{"command":"cat up.txt > copy.txt && echo ok","session_id":"`+s.ID+`"}`)
	var res api.Response
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil || res.Stdout != "ok\n" {
		t.Fatalf("run: %d %s", code, body)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "copy.txt")); err != nil || string(data) != "uploaded\n" {
		t.Errorf("the sandbox's file in %s: %q, %v", ws, data, err)
	}
	if code, body := do("GET", "/sessions/"+s.ID+"/files/copy.txt", ""); code != 200 || body != "uploaded\n" {
		t.Errorf("GET: %d %q", code, body)
	}
	if code, body := do("DELETE", "/sessions/"+s.ID, ""); code/100 != 2 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if ents, _ := os.ReadDir(root); len(ents) > 0 || len(testenv.MountsUnder(root)) > 0 {
		t.Errorf("after DELETE the root holds %v, mounts %v", ents, testenv.MountsUnder(root))
	}
	// testenv's check at cleanup, after the daemon's SIGTERM: nothing
	// left in the state dir or the root.
}
