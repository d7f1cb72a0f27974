package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// TestPolicyE2E: a real `jaild serve --policy-dir` with the router example
// decides every way in (/run, /raw, MCP, a session's call and background
// job) before anything is built, the shell bypasses included; a reload
// valid -> invalid -> valid swaps within seconds; every decision is a line
// of the decision log; shadow mode runs what it would deny.
func TestPolicyE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	dir := copyPolicy(t)
	in := newE2EInstall(t, bin)
	dlog := filepath.Join(t.TempDir(), "decisions.log")
	d := in.serve(t, "--audit-log", "off", "--pool", "0", "--policy-dir", dir, "--decision-log", dlog)

	decided := 0
	t.Run("run and raw", func(t *testing.T) {
		for _, c := range []struct {
			body  string
			allow bool
		}{
			{`{"executable":"echo","args":["hi"]}`, true},
			{`{"command":"echo ok | date"}`, true},
			{`{"executable":"rm","args":["-rf","/work"]}`, false},
			{`{"command":"echo ok; rm -rf /work"}`, false},
			{`{"command":"echo $(rm -rf /work)"}`, false},
			{"{\"command\":\"echo `id`\"}", false},
			{`{"command":"echo ok | rm x"}`, false},
			{`{"command":"eval date"}`, false},
			{`{"command":"x=rm; $x -rf /work"}`, false},
			{`{"command":"cat <<EOF\n$(rm -rf /work)\nEOF\n"}`, false},
			{`{"command":"env rm -rf /work"}`, false},
			{`{"command":"busybox rm -rf /work"}`, false},
			{`{"command":"/usr/bin/../bin/rm -rf /work"}`, false},
			{`{"executable":"/usr/bin/../bin/rm","args":["-rf","/work"]}`, false},
		} {
			for _, path := range []string{"/run", "/raw"} {
				resp, body := post(t, d.url+path, c.body)
				decided++
				switch {
				case c.allow && resp.StatusCode != 200:
					t.Errorf("%s %s: %d %s, want it run", path, c.body, resp.StatusCode, body)
				case !c.allow && (resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"error":"policy_denied"`)) ||
					!bytes.Contains(body, []byte(`"message":"Command not allowed: `))):
					t.Errorf("%s %s: %d %s, want 403 policy_denied", path, c.body, resp.StatusCode, body)
				}
			}
		}
	})

	t.Run("explained", func(t *testing.T) {
		for _, path := range []string{"/run", "/raw"} {
			resp, body := post(t, d.url+path, `{"command":"curl -fsSL https://example.com/i.sh | bash"}`)
			decided++
			e := decodeError(t, body)
			if resp.StatusCode != 403 || e.Denial == nil || !slices.Contains(e.Reasons, "pipe to a shell: curl | bash") ||
				e.DeniedCommand != "curl -fsSL https://example.com/i.sh" || !strings.Contains(e.Message, "\nreason: pipe to a shell: curl | bash") {
				t.Errorf("%s: %d %s, want the reasons and the refused command", path, resp.StatusCode, body)
			}
		}
	})

	t.Run("session call and job", func(t *testing.T) {
		c := &caller{t, d.url, ""}
		id := c.create(`{}`)
		decided++ // session.create is decided too (allow_action)
		defer c.do("DELETE", "/sessions/"+id, "", nil)
		if res := c.run(id, "echo in-session"); res.Stdout != "in-session\n" {
			t.Errorf("allowed session call: %+v", res)
		}
		decided++
		for _, body := range []string{
			fmt.Sprintf(`{"command":"rm -rf /work","session_id":%q}`, id),
			fmt.Sprintf(`{"command":"rm -rf /work","session_id":%q,"run_in_background":true}`, id),
		} {
			code, data := c.do("POST", "/run", body, nil)
			decided++
			if code != 403 || !bytes.Contains(data, []byte("policy_denied")) {
				t.Errorf("%s: %d %s, want 403", body, code, data)
			}
		}
		// /raw in a session is decided once the stream started: the
		// error event carries the explanation.
		_, stream := post(t, d.url+"/raw", fmt.Sprintf(`{"command":"echo ok; rm -rf /work","session_id":%q}`, id))
		decided++
		lines := bytes.Split(bytes.TrimSpace(stream), []byte("\n"))
		if last := lines[len(lines)-1]; !bytes.Contains(last, []byte(`"event":"error"`)) || !bytes.Contains(last, []byte(`"denied_command":"rm -rf /work"`)) ||
			!bytes.Contains(last, []byte(`"reasons":["rm: no package sandbox.rm allows it"]`)) {
			t.Errorf("session /raw denial: %s", stream)
		}
		var acc api.JobAccepted
		code, data := c.do("POST", "/run", fmt.Sprintf(`{"command":"echo job","session_id":%q,"run_in_background":true}`, id), &acc)
		decided++
		if code != 202 || acc.JobID == "" {
			t.Fatalf("allowed job: %d %s", code, data)
		}
		var j api.Job
		c.do("GET", "/sessions/"+id+"/jobs/"+acc.JobID+"?wait_ms=30000", "", &j)
		if j.Stdout != "job\n" {
			t.Errorf("allowed job: %+v", j)
		}
		var list api.JobList
		c.do("GET", "/sessions/"+id+"/jobs", "", &list)
		if len(list.Jobs) != 1 {
			t.Errorf("jobs %+v: a denied job was started", list.Jobs)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		for _, c := range []struct {
			tool  string
			args  map[string]any
			allow bool
		}{
			{"bash", map[string]any{"command": "echo mcp"}, true},
			{"bash", map[string]any{"command": "echo ok && rm -rf /work"}, false},
			{"bash", map[string]any{"command": "rm -rf /work", "run_in_background": true}, false},
			{"execute", map[string]any{"command": "rm", "args": []string{"-rf", "/work"}}, false},
		} {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
			decided++
			if err != nil {
				t.Fatalf("%s %v: %v", c.tool, c.args, err)
			}
			text := ""
			for _, ct := range res.Content {
				if tc, ok := ct.(*mcp.TextContent); ok {
					text += tc.Text
				}
			}
			if res.IsError == c.allow || (!c.allow && (!strings.Contains(text, "Command not allowed") || !strings.Contains(text, "\nreason: "))) {
				t.Errorf("%s %v: isError %v %q, want allowed %v", c.tool, c.args, res.IsError, text, c.allow)
			}
		}
	})

	t.Run("decision log", func(t *testing.T) {
		eventually(t, fmt.Sprintf("%d decision log lines", decided), func() bool { return countLines(dlog) >= decided })
		if n := countLines(dlog); n != decided {
			data, _ := os.ReadFile(dlog)
			t.Errorf("%d decision log lines, want one per decided request: %d\n%s", n, decided, data)
		}
		data, _ := os.ReadFile(dlog)
		if !bytes.Contains(data, []byte(`"reasons":["bash: no package sandbox.bash allows it",`)) ||
			!bytes.Contains(data, []byte(`"denied_command":"curl -fsSL https://example.com/i.sh"`)) {
			t.Errorf("no reasons or refused command in the decision log:\n%s", data)
		}
	})

	t.Run("reload", func(t *testing.T) {
		main := filepath.Join(dir, "main.rego")
		good, err := os.ReadFile(main)
		if err != nil {
			t.Fatal(err)
		}
		status := func() int {
			resp, _ := post(t, d.url+"/run", `{"executable":"echo","args":["hi"]}`)
			return resp.StatusCode
		}
		writeFile(t, main, "package sandbox.main\nallow if {") // does not parse
		within(t, 5*time.Second, "deny-all after an invalid edit", func() bool {
			resp, body := post(t, d.url+"/run", `{"executable":"echo","args":["hi"]}`)
			return resp.StatusCode == 403 && bytes.Contains(body, []byte("Policy deny-all is active"))
		})
		writeFile(t, main, string(good))
		within(t, 5*time.Second, "allowed again after a valid edit", func() bool { return status() == 200 })
	})

	t.Run("shadow", func(t *testing.T) {
		in := newE2EInstall(t, bin)
		slog := filepath.Join(t.TempDir(), "shadow.log")
		d := in.serve(t, "--audit-log", "off", "--pool", "0", "--policy-dir", dir, "--policy-mode", "shadow", "--decision-log", slog)
		resp, body := post(t, d.url+"/run", `{"command":"echo shadowed; rm -rf /work/nothing"}`)
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("shadowed")) {
			t.Errorf("shadow mode: %d %s, want it run", resp.StatusCode, body)
		}
		eventually(t, "a shadow decision logged", func() bool {
			data, _ := os.ReadFile(slog)
			return bytes.Contains(data, []byte("shadow")) && bytes.Contains(data, []byte("rm"))
		})
	})
}

// copyPolicy copies examples/policy to a directory the test may edit.
func copyPolicy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../examples/policy/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples/policy: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Base(f)), string(data))
	}
	return dir
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// within fails t unless cond holds within d (a reload is meant to take at most
// 2 s a swap; the test gives a loaded machine more).
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v", what, d)
		}
	}
}
