package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
)

// TestSandboxWorkDirE2E: a real `jaild serve --sandbox-workdir /workspace`
// puts everything that is at /work by default at /workspace: the one-shot
// run's cwd, HOME and writable tmpfs, a session's workspace and carried
// directory, the files API's paths and the policy's input (its writable
// marking and the files actions' path); /work does not exist in the
// sandbox and is no cwd a request may ask for.
func TestSandboxWorkDirE2E(t *testing.T) {
	bin := e2eJaild(t)
	pol := t.TempDir()
	// Everything is allowed but a command the sandbox could have changed.
	rego := "package sandbox.main\n\ndefault allow := false\n\nallow if input.action != \"run\"\n\nallow if {\n\tinput.action == \"run\"\n\tnot input.writable\n}\n"
	if err := os.WriteFile(filepath.Join(pol, "main.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	dlog := filepath.Join(t.TempDir(), "decisions.jsonl")
	base, token, _ := startServe(t, bin, "--sandbox-workdir", "/workspace", "--policy-dir", pol, "--decision-log", dlog)

	do := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if method != "PUT" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if out != nil && len(data) > 0 {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
			}
		}
		return resp.StatusCode
	}
	run := func(body string) api.Response {
		t.Helper()
		var r api.Response
		if code := do("POST", "/run", body, &r); code != 200 {
			t.Fatalf("POST /run %s: %d %+v", body, code, r)
		}
		return r
	}

	// One-shot: cwd, HOME, a writable working directory, no /work.
	r := run(`{"command":"pwd; echo \"$HOME\"; echo x > f && cat /workspace/f; stat -c %U .; test -e /work || echo no /work"}`)
	if want := "/workspace\n/workspace\nx\nsandbox\nno /work\n"; r.Stdout != want || r.ExitCode != 0 {
		t.Errorf("one-shot: %q (exit %d, stderr %q), want %q", r.Stdout, r.ExitCode, r.Stderr, want)
	}
	var e api.ErrorResponse
	if code := do("POST", "/run", `{"command":"pwd","cwd":"/work"}`, &e); code != 400 || e.Field != "cwd" || !strings.Contains(e.Error, "/workspace") {
		t.Errorf("cwd /work: %d %+v, want 400 naming /workspace", code, e)
	}
	if r := run(`{"command":"pwd","cwd":"/workspace"}`); r.Stdout != "/workspace\n" {
		t.Errorf("cwd /workspace: %+v", r)
	}
	// The policy sees /workspace as writable: a PATH through it is.
	if code := do("POST", "/run", `{"executable":"true","env":{"PATH":"/workspace/bin:/usr/bin:/bin"}}`, &e); code != 403 {
		t.Errorf("PATH through /workspace: %d %+v, want the policy's 403", code, e)
	}

	// A session: its workspace, directory and files are at /workspace.
	var s api.Session
	if code := do("POST", "/sessions", `{}`, &s); code != 201 || s.WorkDir != "/workspace" || s.Cwd != "/workspace" {
		t.Fatalf("create session: %d %+v", code, s)
	}
	if r := run(`{"session_id":"` + s.ID + `","command":"mkdir -p src && cd src && echo \"$HOME\""}`); r.Stdout != "/workspace\n" {
		t.Errorf("session call: %+v", r)
	}
	if code := do("PUT", "/sessions/"+s.ID+"/files/src/hello.txt", "hi\n", nil); code != 204 {
		t.Fatalf("PUT a file: %d", code)
	}
	if r := run(`{"session_id":"` + s.ID + `","command":"pwd; cat hello.txt"}`); r.Stdout != "/workspace/src\nhi\n" {
		t.Errorf("carried cwd and the file: %+v", r)
	}
	var got api.Session
	if do("GET", "/sessions/"+s.ID, "", &got); got.Cwd != "/workspace/src" || got.WorkDir != "/workspace" {
		t.Errorf("session: %+v", got)
	}
	var l api.FileList
	if code := do("GET", "/sessions/"+s.ID+"/files/src", "", &l); code != 200 || l.Path != "/workspace/src" || len(l.Entries) != 1 {
		t.Errorf("listing: %d %+v", code, l)
	}
	if code := do("GET", "/sessions/"+s.ID+"/files/nope", "", &e); code != 404 || !strings.Contains(e.Error, "/workspace/nope") {
		t.Errorf("missing file: %d %+v", code, e)
	}
	// A session call's ./tool is the workspace's: writable, denied.
	if code := do("POST", "/run", `{"session_id":"`+s.ID+`","executable":"./hello.txt"}`, &e); code != 403 {
		t.Errorf("./hello.txt in the session: %d %+v, want the policy's 403", code, e)
	}

	// The decision log: what the policy saw.
	f, err := os.Open(dlog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sawWrite, sawPath, sawSession bool
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Input struct {
				Action, Command, Path, File, Cwd string
				Writable                         bool
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		t.Logf("decision: %s", sc.Bytes())
		in := line.Input
		switch {
		case in.Action == "files.write":
			sawWrite = in.File == "/workspace/src/hello.txt"
		case in.Command == "true":
			// Env values are redacted in the log; this is the PATH run.
			sawPath = in.Writable
		case in.Command == "./hello.txt":
			// Not executable: no path, but found where the sandbox writes.
			sawSession = in.Writable && in.Cwd == "/workspace/src"
		case in.Action == "session.create" && in.Cwd != "/workspace":
			t.Errorf("session.create input cwd %q", in.Cwd)
		}
	}
	if !sawWrite || !sawPath || !sawSession {
		t.Errorf("decision log: files.write at /workspace %v, PATH through /workspace writable %v, session ./hello.txt writable at /workspace/src %v",
			sawWrite, sawPath, sawSession)
	}
}
