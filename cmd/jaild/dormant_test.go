package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/testenv"
)

// TestServeSessionDormant: a session idle past --session-prestart-idle
// keeps no sandbox started (no process in the daemon's cgroup), still runs
// its next call, on a fresh sandbox, with its workspace's files, and then
// keeps one started again, which the call after takes
// (jaild_runs_prestarted_total counts it).
func TestServeSessionDormant(t *testing.T) {
	in := newInstall(t)
	addr, log := startServe(t, in, false, "--session-prestart-idle", "3s", "--debug")
	base := "http://" + addr
	do := func(method, path, body string) (int, string) {
		t.Helper()
		return request(t, base, method, path, body)
	}
	prestarted := func() string {
		t.Helper()
		_, metrics := do("GET", "/metrics", "")
		m := regexp.MustCompile(`(?m)^jaild_runs_prestarted_total\{from="session"\} (\S+)$`).FindStringSubmatch(metrics)
		if m == nil {
			t.Fatalf("no session count in /metrics:\n%s", metrics)
		}
		return m[1]
	}
	// --pool 0: the sessions' prestarted sandboxes are the only
	// processes in the daemon's cgroup while nothing runs.
	procs := func() int { return len(testenv.ProcsInCgroup(filepath.Base(in.Parent))) }
	waitProcs := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); procs() != n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 30s for %s: %d processes in the daemon's cgroup, want %d", what, procs(), n)
			}
		}
	}
	call := func(id, command, want string) {
		t.Helper()
		code, body := do("POST", "/run", fmt.Sprintf(`{"session_id":%q,"command":%q}`, id, command))
		if code != 200 || !strings.Contains(body, `"stdout":`+want) {
			t.Fatalf("%s: %d %s, want stdout %s", command, code, body, want)
		}
	}

	code, body := do("POST", "/sessions", `{}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /sessions: %d %s", code, body)
	}
	_, rest, _ := strings.Cut(body, `"id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	waitProcs(1, "the session's prestarted sandbox")
	call(id, "echo one > f; echo ok", `"ok\n"`)
	// The sandbox that replaces the one the call took, then none.
	waitProcs(1, "the next prestarted sandbox")
	log.waitFor(t, `"msg":"workspace dormant`)
	waitProcs(0, "the dormant session's sandbox to go")

	before := prestarted()
	call(id, "cat f", `"one\n"`)
	if after := prestarted(); after != before {
		t.Errorf("the first call in a dormant session was prestarted: count %s -> %s", before, after)
	}
	waitProcs(1, "the woken session's prestarted sandbox")
	call(id, "cat f", `"one\n"`)
	if after := prestarted(); after == before {
		t.Errorf("the call after waking was not prestarted: count %s", after)
	}
	if code, body := do("DELETE", "/sessions/"+id, ""); code != http.StatusNoContent {
		t.Errorf("DELETE: %d %s", code, body)
	}
}
