package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/server"
)

// TestSessionsE2E drives sessions through a real `jaild serve` and its
// worker: real workspaces, sandboxes and background jobs. It needs root.
func TestSessionsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	t.Run("http", func(t *testing.T) { testSessionsHTTP(t, bin) })
	t.Run("ttl", func(t *testing.T) { testSessionsTTL(t, bin) })
	t.Run("worker restart loses the sessions", func(t *testing.T) { testSessionsWorkerRestart(t, bin) })
	t.Run("SIGKILL and restart leave nothing", func(t *testing.T) { testSessionsSigkill(t, bin) })
	t.Run("mcp", func(t *testing.T) { testSessionsMCP(t, bin) })
	t.Run("agent over http", func(t *testing.T) { testSessionsAgent(t, bin) })
}

// caller is one authenticated client of a test daemon.
type caller struct {
	t     *testing.T
	url   string
	token string
}

// do sends method on path with a JSON body (if not empty) and decodes a
// JSON answer into out (if not nil); it returns the status and the body.
func (c *caller) do(method, path, body string, out any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, c.url+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return resp.StatusCode, data
}

// run runs a shell command in session id and returns the result.
func (c *caller) run(id, command string) api.Response {
	c.t.Helper()
	var res api.Response
	body := fmt.Sprintf(`{"command":%q,"session_id":%q,"timeout_seconds":60}`, command, id)
	if code, data := c.do("POST", "/run", body, &res); code != 200 {
		c.t.Fatalf("run %q: %d %s", command, code, data)
	}
	return res
}

// create makes a session and returns its id.
func (c *caller) create(body string) string {
	c.t.Helper()
	var s api.Session
	if code, data := c.do("POST", "/sessions", body, &s); code != 201 {
		c.t.Fatalf("create session: %d %s", code, data)
	}
	return s.ID
}

// raw sends method on path with body and the given headers and returns the
// status and the answer's body.
func (c *caller) raw(method, path string, body io.Reader, header ...string) (int, []byte) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.url+path, body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	cl := &http.Client{Timeout: 30 * time.Second} // a fifo must not hang the daemon
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// testSessionFiles drives the files API of a real daemon: what is uploaded
// is the sandbox's, and what the sandbox writes (links out, a fifo) never
// leads the daemon out of the workspace.
func testSessionFiles(t *testing.T, alice, bob *caller, id string) {
	base := "/sessions/" + id + "/files/"
	if code, data := alice.raw("PUT", base+"up/hello.txt", strings.NewReader("uploaded\n")); code != 204 {
		t.Fatalf("PUT: %d %s", code, data)
	}
	res := alice.run(id, "cat /work/up/hello.txt; stat -c %U /work/up/hello.txt; echo changed >> /work/up/hello.txt")
	if res.Stdout != "uploaded\nsandbox\n" {
		t.Errorf("the sandbox reads %q (stderr %q), want the upload owned by sandbox", res.Stdout, res.Stderr)
	}
	if code, data := alice.raw("GET", base+"up/hello.txt", nil); code != 200 || string(data) != "uploaded\nchanged\n" {
		t.Errorf("GET after the sandbox's write: %d %q", code, data)
	}

	// Tar out and back in under another name.
	code, tarball := alice.raw("GET", base+"up", nil, "Accept", "application/x-tar")
	if code != 200 {
		t.Fatalf("GET tar: %d %s", code, tarball)
	}
	if code, data := alice.raw("PUT", base+"copy", bytes.NewReader(tarball), "Content-Type", "application/x-tar"); code != 204 {
		t.Fatalf("PUT tar: %d %s", code, data)
	}
	if res := alice.run(id, "cat /work/copy/hello.txt"); res.Stdout != "uploaded\nchanged\n" {
		t.Errorf("unpacked tar reads %q (stderr %q)", res.Stdout, res.Stderr)
	}

	// What the sandbox plants.
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = alice.run(id, fmt.Sprintf("ln -s /etc /work/etc && ln -s %s /work/canary && ln -s ../../../../../.. /work/up/dotdot && mkfifo /work/fifo && echo planted", canary))
	if res.Stdout != "planted\n" {
		t.Fatalf("planting: %+v", res)
	}
	for _, r := range []struct {
		method, path string
		body         string
	}{
		{"GET", "etc/passwd", ""},
		{"GET", "etc/hostname", ""},
		{"GET", "canary", ""},
		{"GET", "up/dotdot/etc/passwd", ""},
		{"GET", "fifo", ""},
		{"PUT", "etc/jaild-evil", "x"},
		{"PUT", "canary", "overwritten"},
		{"PUT", "up/dotdot/tmp/jaild-evil", "x"},
		{"DELETE", "etc/hostname", ""},
	} {
		var body io.Reader
		if r.body != "" {
			body = strings.NewReader(r.body)
		}
		code, data := alice.raw(r.method, base+r.path, body)
		if r.method == "GET" && (code == 200 || bytes.Contains(data, []byte("root:"))) {
			t.Errorf("%s %s: %d %.80q: the daemon followed a link out of the workspace", r.method, r.path, code, data)
		}
		if r.method == "DELETE" && code == 204 {
			t.Errorf("%s %s: 204", r.method, r.path)
		}
	}
	if data, err := os.ReadFile(canary); err != nil || string(data) != "host" {
		t.Errorf("host canary: %q %v", data, err)
	}
	for _, p := range []string{"/etc/jaild-evil", "/tmp/jaild-evil"} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s was created on the host", p)
		}
	}
	if _, err := os.Stat("/etc/hostname"); err != nil {
		t.Errorf("/etc/hostname: %v", err)
	}

	// A listing shows links without following them; DELETE removes.
	var list api.FileList
	code, data := alice.raw("GET", base, nil)
	if code != 200 || json.Unmarshal(data, &list) != nil {
		t.Fatalf("list: %d %s", code, data)
	}
	types := map[string]string{}
	for _, e := range list.Entries {
		types[e.Name] = e.Type + ":" + e.Target
	}
	if types["etc"] != "symlink:/etc" || types["up"] != "dir:" {
		t.Errorf("listing %v", types)
	}
	if code, data := alice.raw("DELETE", base+"copy", nil); code != 204 {
		t.Errorf("DELETE: %d %s", code, data)
	}
	if res := alice.run(id, "test -e /work/copy || echo gone"); res.Stdout != "gone\n" {
		t.Errorf("after DELETE: %q", res.Stdout)
	}
	if code, _ := bob.raw("GET", base+"up/hello.txt", nil); code != 404 {
		t.Errorf("bob reads alice's file: %d", code)
	}
	alice.run(id, "rm -rf /work/up /work/etc /work/canary /work/fifo")
}

// twoCallers writes a token file with callers a and b.
func twoCallers(t *testing.T) (file string, a, b string) {
	a, b = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
	file = filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice:"+a+"\nbob:"+b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, a, b
}

func testSessionsHTTP(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, ta, tb := twoCallers(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	d := in.serve(t, "--token-file", tokens, "--audit-log", audit, "--pool", "0",
		"--max-sessions-per-caller", "2", "--max-jobs", "3", "--workspace-size", "64M")
	alice := &caller{t, d.url, ta}
	bob := &caller{t, d.url, tb}

	id := alice.create(`{"env":{"GREETING":"hi"}}`)
	t.Run("carry over", func(t *testing.T) {
		res := alice.run(id, "echo content > f.txt && mkdir -p sub && cd sub && export FOO=bar")
		if res.ExitCode != 0 {
			t.Fatalf("first call: %+v", res)
		}
		res = alice.run(id, `cat /work/f.txt; pwd; echo "$FOO $GREETING"`)
		if want := "content\n/work/sub\nbar hi\n"; res.Stdout != want {
			t.Errorf("second call stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
		}
		// The session does not change the shell: /run's command runs
		// in /bin/sh, as without a session, and hard values carry over.
		res = alice.run(id, `echo "$0"; export Q="it's '\''\"q\" \$x \\" NL="$(printf 'a\nb')"`)
		if res.Stdout != "/bin/sh\n" {
			t.Errorf("shell of a session call: %q (stderr %q)", res.Stdout, res.Stderr)
		}
		res = alice.run(id, `printf '%s|' "$Q" "$NL"`)
		if want := "it's '\\''\"q\" $x \\|a\nb|"; res.Stdout != want {
			t.Errorf("hard values carried: %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
		}
		var s api.Session
		alice.do("GET", "/sessions/"+id, "", &s)
		if s.Cwd != "/work/sub" || s.Env["FOO"] != "bar" || s.WorkspaceBytesMax != 64<<20 || s.WorkspaceBytesUsed <= 0 {
			t.Errorf("session %+v", s)
		}
	})

	t.Run("latency", func(t *testing.T) {
		// Logged, not asserted: a session call against a one-shot run
		// (both without a pool), whatever the host's load.
		const n = 10
		var inSession, oneShot time.Duration
		for range n {
			t0 := time.Now()
			alice.run(id, "true")
			inSession += time.Since(t0)
			t0 = time.Now()
			if code, data := alice.do("POST", "/run", `{"command":"true"}`, nil); code != 200 {
				t.Fatalf("one-shot: %d %s", code, data)
			}
			oneShot += time.Since(t0)
		}
		t.Logf("mean of %d calls: in a session %v, one-shot %v", n, inSession/n, oneShot/n)
	})

	var server string
	t.Run("background server reached from a later call", func(t *testing.T) {
		var acc api.JobAccepted
		body := fmt.Sprintf(`{"command":"cd /work && exec python3 -m http.server 8123 --bind 127.0.0.1","session_id":%q,"run_in_background":true}`, id)
		if code, data := alice.do("POST", "/run", body, &acc); code != 202 || acc.JobID == "" || acc.SessionID != id {
			t.Fatalf("background run: %d %s", code, data)
		}
		server = acc.JobID
		if acc.Status != "/sessions/"+id+"/jobs/"+acc.JobID {
			t.Errorf("status %q", acc.Status)
		}
		res := alice.run(id, "for i in $(seq 100); do curl -sf http://127.0.0.1:8123/f.txt && exit 0; sleep 0.1; done; exit 1")
		if res.ExitCode != 0 || res.Stdout != "content\n" {
			t.Errorf("curl from the next call: %+v", res)
		}
	})

	t.Run("job output with offsets and wait", func(t *testing.T) {
		var acc api.JobAccepted
		body := fmt.Sprintf(`{"command":"for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2; exit 3","session_id":%q,"run_in_background":true}`, id)
		if code, data := alice.do("POST", "/run", body, &acc); code != 202 {
			t.Fatalf("background run: %d %s", code, data)
		}
		path := "/sessions/" + id + "/jobs/" + acc.JobID
		var j api.Job
		alice.do("GET", path+"?wait_ms=30000", "", &j)
		if j.State != "exited" || j.Stdout != "line1\nline2\nline3\n" || j.Stderr != "err\n" ||
			j.ExitCode == nil || *j.ExitCode != 3 || j.StdoutOffset != 18 || j.Verdict == nil || j.EndedAt == nil {
			t.Fatalf("job %+v", j)
		}
		alice.do("GET", path+"?stdout_offset=12&stderr_offset=4", "", &j)
		if j.Stdout != "line3\n" || j.Stderr != "" || j.StdoutOffset != 18 || j.StderrOffset != 4 {
			t.Errorf("from offsets: %+v", j)
		}
		alice.do("GET", path+"?offset=6", "", &j)
		if j.Stdout != "line2\nline3\n" || j.Stderr != "" {
			t.Errorf("from offset 6: %+v", j)
		}
		if code, data := alice.do("GET", path+"?offset=1&stdout_offset=2", "", nil); code != 400 || !bytes.Contains(data, []byte(`"field":"offset"`)) {
			t.Errorf("offset and stdout_offset: %d %s", code, data)
		}
		if code, _ := alice.do("GET", path+"?wait_ms=-1", "", nil); code != 400 {
			t.Errorf("wait_ms=-1: %d", code)
		}
		for _, q := range []string{"?until=soon", "?until=output&until=end"} {
			if code, data := alice.do("GET", path+q, "", nil); code != 400 || !bytes.Contains(data, []byte(`"field":"until"`)) {
				t.Errorf("%s: %d %s", q, code, data)
			}
		}
		var list api.JobList
		alice.do("GET", "/sessions/"+id+"/jobs", "", &list)
		if len(list.Jobs) != 2 {
			t.Errorf("jobs %+v", list)
		}
	})

	t.Run("kill a job", func(t *testing.T) {
		var j api.Job
		if code, data := alice.do("DELETE", "/sessions/"+id+"/jobs/"+server, "", &j); code != 200 {
			t.Fatalf("kill: %d %s", code, data)
		}
		if j.State != "exited" || j.Verdict == nil || !j.Verdict.Canceled {
			t.Errorf("killed job %+v", j)
		}
		res := alice.run(id, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8123/ || echo refused")
		if !strings.Contains(res.Stdout, "refused") && !strings.Contains(res.Stdout, "000") {
			t.Errorf("the server still answers after the kill: %q", res.Stdout)
		}
	})

	t.Run("files", func(t *testing.T) { testSessionFiles(t, alice, bob, id) })

	t.Run("another caller gets 404", func(t *testing.T) {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/sessions/" + id, ""},
			{"PATCH", "/sessions/" + id, `{"env":{"X":"1"}}`},
			{"DELETE", "/sessions/" + id, ""},
			{"GET", "/sessions/" + id + "/jobs", ""},
			{"GET", "/sessions/" + id + "/jobs/" + server, ""},
			{"POST", "/run", fmt.Sprintf(`{"command":"cat /work/f.txt","session_id":%q}`, id)},
			{"POST", "/raw", fmt.Sprintf(`{"command":"cat /work/f.txt","session_id":%q}`, id)},
		} {
			if code, data := bob.do(r.method, r.path, r.body, nil); code != 404 || !bytes.Contains(data, []byte(`"code":"not_found"`)) {
				t.Errorf("bob %s %s: %d %s", r.method, r.path, code, data)
			}
		}
		var list api.SessionList
		bob.do("GET", "/sessions", "", &list)
		if len(list.Sessions) != 0 {
			t.Errorf("bob lists %+v", list)
		}
	})

	t.Run("bad input is 400 with the field", func(t *testing.T) {
		for _, r := range []struct{ method, path, body, field string }{
			{"POST", "/sessions", `{"ttl_seconds":"x"}`, "ttl_seconds"},
			{"POST", "/sessions", `{"ttl_seconds":0}`, "ttl_seconds"},
			{"POST", "/sessions", `{"nope":1}`, ""},
			{"POST", "/sessions", `{"cwd":"/etc"}`, "cwd"},
			{"POST", "/sessions", `{"limits":{"memory_bytes":1099511627776}}`, "memory_bytes"},
			{"POST", "/sessions", `{"workspace_bytes":1099511627776}`, "workspace_bytes"},
			{"POST", "/run", `{"command":"true","run_in_background":true}`, "run_in_background"},
			{"POST", "/raw", fmt.Sprintf(`{"command":"true","session_id":%q,"run_in_background":true}`, id), "run_in_background"},
			{"POST", "/run", fmt.Sprintf(`{"command":"true","session_id":%q,"run_in_background":true,"timeout_seconds":86400}`, id), "timeout_seconds"},
		} {
			code, data := alice.do(r.method, r.path, r.body, nil)
			if code != 400 || (r.field != "" && !bytes.Contains(data, []byte(`"field":"`+r.field+`"`))) {
				t.Errorf("%s %s %s: %d %s, want 400 naming %q", r.method, r.path, r.body, code, data, r.field)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		id2 := alice.create(`{}`)
		if code, data := alice.do("POST", "/sessions", `{}`, nil); code != 409 || !bytes.Contains(data, []byte(`"code":"limit"`)) {
			t.Errorf("third session of alice: %d %s", code, data)
		}
		bob.create(`{}`) // bob's own count
		// Three jobs kept: two ended ones are forgotten to make room,
		// three running ones are the limit.
		for i := range 3 {
			body := fmt.Sprintf(`{"command":"sleep %s","session_id":%q,"run_in_background":true}`, in.marker, id2)
			if code, data := alice.do("POST", "/run", body, nil); code != 202 {
				t.Fatalf("job %d: %d %s", i, code, data)
			}
		}
		_, metrics := alice.do("GET", "/metrics", "", nil)
		for _, want := range []string{"\njaild_sessions 3\n", "\njaild_jobs_running 3\n", `jaild_runs_total{verdict="started"}`,
			// --pool 0: no one-shot run was prestarted; the session
			// calls so far were (their sessions keep one sandbox
			// started for the next call).
			"\n" + `jaild_runs_prestarted_total{from="pool"} 0` + "\n"} {
			if !bytes.Contains(metrics, []byte(want)) {
				t.Errorf("metrics lack %q", want)
			}
		}
		if bytes.Contains(metrics, []byte(`jaild_runs_prestarted_total{from="session"} 0`+"\n")) ||
			!bytes.Contains(metrics, []byte(`jaild_runs_prestarted_total{from="session"} `)) {
			t.Errorf("no session call was served by a prestarted sandbox:\n%s", metrics)
		}
		body := fmt.Sprintf(`{"command":"true","session_id":%q,"run_in_background":true}`, id2)
		if code, data := alice.do("POST", "/run", body, nil); code != 409 || !bytes.Contains(data, []byte("jobs per session")) {
			t.Errorf("fourth running job: %d %s", code, data)
		}
		// DELETE with running jobs kills them and removes everything
		// (the install's leak check runs at the end too).
		if code, data := alice.do("DELETE", "/sessions/"+id2, "", nil); code != 204 {
			t.Errorf("delete: %d %s", code, data)
		}
		if pids := pidsWith(in.marker); len(pids) > 0 {
			t.Errorf("job processes %v survived the session's DELETE", pids)
		}
		if code, _ := alice.do("GET", "/sessions/"+id2, "", nil); code != 404 {
			t.Errorf("GET after DELETE: %d", code)
		}
	})

	t.Run("audit log", func(t *testing.T) {
		data, _ := os.ReadFile(audit)
		var started, inSession int
		for _, line := range bytes.Split(data, []byte("\n")) {
			var rec api.AuditRecord
			if json.Unmarshal(line, &rec) != nil {
				continue
			}
			if rec.SessionID == id {
				inSession++
			}
			if rec.Verdict == api.VerdictStarted && rec.JobID != "" && rec.SessionID != "" {
				started++
			}
		}
		if started < 5 || inSession < 5 {
			t.Errorf("audit log: %d started jobs, %d records of the session:\n%s", started, inSession, data)
		}
	})

	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
	if names := testenv.Workspaces(in.StateDir); len(names) > 0 {
		t.Errorf("workspaces left after SIGTERM: %v", names)
	}
}

// testSessionsTTL: an idle session expires and its workspace goes.
func testSessionsTTL(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, ta, _ := twoCallers(t)
	d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0", "--session-ttl", "1s")
	alice := &caller{t, d.url, ta}
	id := alice.create(`{}`)
	alice.run(id, "echo x > f")
	if ws := testenv.Workspaces(in.StateDir); len(ws) != 1 {
		t.Fatalf("workspaces %v", ws)
	}
	eventually(t, "the idle session to expire", func() bool {
		code, _ := alice.do("GET", "/sessions/"+id, "", nil)
		return code == 404
	})
	eventually(t, "its workspace to go", func() bool { return len(testenv.Workspaces(in.StateDir)) == 0 })
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
}

// testSessionsWorkerRestart: when the worker dies, the daemon starts
// another; the sessions went with the old one and say so.
func testSessionsWorkerRestart(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, ta, _ := twoCallers(t)
	d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0")
	alice := &caller{t, d.url, ta}
	id := alice.create(`{}`)
	body := fmt.Sprintf(`{"command":"exec sleep %s","session_id":%q,"run_in_background":true}`, in.marker, id)
	if code, data := alice.do("POST", "/run", body, nil); code != 202 {
		t.Fatalf("job: %d %s", code, data)
	}
	eventually(t, "the job to run", func() bool { return len(pidsWith(in.marker)) == 1 })
	w := workerOf(t, in, d)
	syscall.Kill(w, syscall.SIGKILL)
	eventually(t, "the job to die with the worker", func() bool { return len(pidsWith(in.marker)) == 0 })
	eventually(t, "the session to be lost", func() bool {
		code, data := alice.do("GET", "/sessions/"+id, "", nil)
		return code == 404 && bytes.Contains(data, []byte("lost"))
	})
	eventually(t, "the workspace to be swept", func() bool {
		return len(testenv.Workspaces(in.StateDir)) == 0
	})
	// The restarted worker serves new sessions.
	eventually(t, "a new session", func() bool {
		code, _ := alice.do("POST", "/sessions", `{}`, nil)
		return code == 201
	})
	if _, m := alice.do("GET", "/metrics", "", nil); !bytes.Contains(m, []byte("\njaild_worker_exits_total 1\n")) {
		t.Errorf("metrics after one worker exit:\n%s", grepLines(m, "jaild_worker"))
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
}

// workerOf is the pid of d's worker.
func workerOf(t *testing.T, in *e2eInstall, d *daemon) int {
	t.Helper()
	for _, pid := range pidsWith(in.StateDir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00worker\x00")) && parentOf(pid) == d.cmd.Process.Pid {
			return pid
		}
	}
	t.Fatal("no worker")
	return 0
}

// testSessionsSigkill: a daemon killed outright with its worker and the
// worker's watchdog, while a session runs a job and keeps a sandbox
// prestarted for its next call, leaves its workspace behind; the next
// daemon sweeps it (tmpfs, network namespace, both sandboxes).
func testSessionsSigkill(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, ta, _ := twoCallers(t)
	d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0")
	alice := &caller{t, d.url, ta}
	id := alice.create(`{}`)
	alice.run(id, "echo x > f")
	body := fmt.Sprintf(`{"command":"exec sleep %s","session_id":%q,"run_in_background":true}`, in.marker, id)
	if code, data := alice.do("POST", "/run", body, nil); code != 202 {
		t.Fatalf("job: %d %s", code, data)
	}
	eventually(t, "the job to run", func() bool { return len(pidsWith(in.marker)) == 1 })
	// --pool 0: the only waiting init is the session's.
	eventually(t, "a sandbox prestarted for the next call", func() bool { return len(prestartedIn(in)) == 1 })
	dogs := testenv.Watchdogs(in.StateDir)
	w := workerOf(t, in, d)
	for _, pid := range append([]int{w}, dogs...) {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	for _, pid := range append([]int{w}, dogs...) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	d.exited <- server.Recv(t, d.exited, "jaild serve to exit")
	if ws := testenv.Workspaces(in.StateDir); len(ws) != 1 {
		t.Fatalf("after SIGKILL: workspaces %v; the test would prove nothing", ws)
	}
	d2 := in.serve(t, "--audit-log", "off", "--pool", "0") // sweeps before it listens
	if names := testenv.Workspaces(in.StateDir); len(names) > 0 {
		t.Errorf("workspaces %v survived the restart", names)
	}
	if names := dirNames(filepath.Join(in.StateDir, "workspaces")); len(names) > 0 {
		t.Errorf("workspace mounts %v survived the restart", names)
	}
	if names := dirNames(filepath.Join(in.StateDir, "netns")); len(names) > 0 {
		t.Errorf("network namespaces %v survived the restart", names)
	}
	eventually(t, "the job's processes to go", func() bool { return len(pidsWith(in.marker)) == 0 })
	eventually(t, "the prestarted sandbox to go", func() bool { return len(prestartedIn(in)) == 0 })
	if err := d2.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
}

// prestartedIn lists the processes of in's sandboxes that wait for a
// command (pool-wait).
func prestartedIn(in *e2eInstall) []string {
	var out []string
	for _, p := range testenv.ProcsInCgroup(filepath.Base(in.Parent)) {
		if strings.Contains(p, "pool-wait") {
			out = append(out, p)
		}
	}
	return out
}

// testSessionsMCP: over Streamable HTTP against the real daemon, an MCP
// session's tool calls share a jaild session (files, cd, exports, a
// background server), and closing the MCP session removes it.
func testSessionsMCP(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serve(t, "--audit-log", "off", "--pool", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		out, _ := res.StructuredContent.(map[string]any)
		return res, out
	}
	if res, _ := call("bash", map[string]any{"command": "echo kept > f && mkdir d && cd d && export X=1"}); res.IsError {
		t.Fatalf("first call: %+v", res.Content)
	}
	_, out := call("bash", map[string]any{"command": `cat /work/f; pwd; echo "x=$X"`})
	if out["stdout"] != "kept\n/work/d\nx=1\n" {
		t.Errorf("second call: %v", out)
	}
	// The bash tool's calls and tasks run in --shell-path (/bin/bash), in
	// a session as without one.
	_, out = call("bash", map[string]any{"command": `[[ -n $BASH_VERSION ]] && echo "$0"; export Q="it's \"q\" \$x"`})
	if out["stdout"] != "/bin/bash\n" {
		t.Errorf("shell of a session call: %v", out)
	}
	if _, out = call("bash", map[string]any{"command": `echo "$Q"`}); out["stdout"] != "it's \"q\" $x\n" {
		t.Errorf("carried from bash: %v", out)
	}
	_, out = call("bash", map[string]any{"command": `echo "$0"`, "run_in_background": true})
	if task, _ := out["task_id"].(string); task == "" {
		t.Errorf("background bash: %v", out)
	} else if _, out = call("task_output", map[string]any{"task_id": task}); out["stdout"] != "/bin/bash\n" {
		t.Errorf("shell of a task: %v", out)
	}
	_, out = call("bash", map[string]any{"command": "cd /work && exec python3 -m http.server 8124 --bind 127.0.0.1", "run_in_background": true})
	task, _ := out["task_id"].(string)
	if task == "" {
		t.Fatalf("background bash: %v", out)
	}
	_, out = call("bash", map[string]any{"command": "for i in $(seq 100); do curl -sf http://127.0.0.1:8124/f && exit 0; sleep 0.1; done; exit 1"})
	if out["stdout"] != "kept\n" {
		t.Errorf("curl the task's server: %v", out)
	}
	if _, out = call("list_tasks", map[string]any{}); !strings.Contains(fmt.Sprint(out["tasks"]), task) {
		t.Errorf("list_tasks: %v", out)
	}
	if _, out = call("task_output", map[string]any{"task_id": task, "block": false}); out["state"] != "running" {
		t.Errorf("task_output of the server: %v", out)
	}
	if _, out = call("kill_task", map[string]any{"task_id": task}); out["state"] != "exited" {
		t.Errorf("kill_task: %v", out)
	}
	if ws := testenv.Workspaces(in.StateDir); len(ws) != 1 {
		t.Errorf("workspaces %v, want the MCP session's one", ws)
	}
	cs.Close() // DELETE: the jaild session goes
	eventually(t, "the MCP session's workspace to go", func() bool { return len(testenv.Workspaces(in.StateDir)) == 0 })
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
}

// grepLines is the lines of data that contain s.
func grepLines(data []byte, s string) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.Contains(l, []byte(s)) {
			out = append(out, l...)
		}
	}
	return out
}
