package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// TestSessionEgress: a session created with egress reaches the allowed
// name from every call and from a background job through the proxy its
// workspace's network namespace holds, a denied name gets 403, a call may
// not ask for egress itself, the session's counters and the audit log
// name what went through; a session without egress has no proxy at all;
// DELETE leaves no mount, netns pin or process.
func TestSessionEgress(t *testing.T) {
	in := newInstall(t)
	up := helloUpstream(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	addr, _ := startServe(t, in, false, "--egress-allow", "up.test:80",
		"--egress-resolve", "up.test="+up.Addr.String()+",denied.test="+up.Addr.String(), "--audit-log", audit)
	base := "http://" + addr
	do := func(method, path, body string, out any) int {
		t.Helper()
		code, b := request(t, base, method, path, body)
		if out != nil && len(b) > 0 {
			if err := json.Unmarshal([]byte(b), out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		if code >= 300 && out == nil {
			t.Logf("%s %s: %d %s", method, path, code, b)
		}
		return code
	}
	run := func(session, command string) api.Response {
		t.Helper()
		var res api.Response
		if code := do("POST", "/run", fmt.Sprintf(`{"command":%q,"session_id":%q}`, command, session), &res); code != 200 {
			t.Fatalf("run %q: status %d: %+v", command, code, res)
		}
		return res
	}
	var withEg, without api.Session
	if code := do("POST", "/sessions", `{"egress":true}`, &withEg); code != 201 {
		t.Fatalf("POST /sessions with egress: %d", code)
	}
	if code := do("POST", "/sessions", `{}`, &without); code != 201 {
		t.Fatalf("POST /sessions: %d", code)
	}
	deleted := map[string]bool{}
	t.Cleanup(func() {
		for _, id := range []string{withEg.ID, without.ID} {
			if !deleted[id] {
				do("DELETE", "/sessions/"+id, "", nil)
			}
		}
	})
	if without.Egress != nil || withEg.Egress == nil {
		t.Errorf("egress counters: with %+v, without %+v", withEg.Egress, without.Egress)
	}

	// Two calls, each a fresh sandbox on the session's workspace.
	if res := run(withEg.ID, "curl -sS http://up.test/one"); res.Stdout != "hello from upstream host=up.test\n" {
		t.Errorf("first call: %+v", res)
	}
	if res := run(withEg.ID, "curl -s -o /dev/null -w '%{http_code}' http://denied.test/; echo; curl -sS http://up.test/two"); res.Stdout != "403\nhello from upstream host=up.test\n" {
		t.Errorf("second call: %+v", res)
	}
	// A background job gets the proxy too.
	var acc api.JobAccepted
	if code := do("POST", "/run", fmt.Sprintf(`{"command":"curl -sS http://up.test/job","session_id":%q,"run_in_background":true}`, withEg.ID), &acc); code != 202 {
		t.Fatalf("background run: %d", code)
	}
	var job api.Job
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if code := do("GET", acc.Status, "", &job); code != 200 {
			t.Fatalf("GET %s: %d", acc.Status, code)
		}
		if job.State != "running" || time.Now().After(deadline) {
			break
		}
	}
	if job.State != "exited" || job.Stdout != "hello from upstream host=up.test\n" {
		t.Errorf("job: %+v", job)
	}
	// A call does not decide egress: the session did.
	var e api.ErrorResponse
	if code := do("POST", "/run", fmt.Sprintf(`{"command":"true","session_id":%q,"egress":true}`, withEg.ID), &e); code != 400 || e.Field != "egress" || !strings.Contains(e.Error, "when the session is created") {
		t.Errorf("a call's egress: %d %+v", code, e)
	}
	var got api.Session
	if code := do("GET", "/sessions/"+withEg.ID, "", &got); code != 200 || got.Egress == nil {
		t.Fatalf("GET session: %d %+v", code, got)
	}
	if u := got.Egress; u.Connections != 3 || u.Denied != 1 || u.BytesIn <= 0 || u.BytesOut <= 0 {
		t.Errorf("session counters %+v, want 3 connections, 1 denied, bytes both ways", u)
	}

	// Without egress: no proxy variables, nothing listens on 3128.
	res := run(without.ID, `echo "[$HTTP_PROXY]"; curl -sS --max-time 5 http://127.0.0.1:3128/ >/dev/null 2>&1; echo "curl=$?"`)
	if res.Stdout != "[]\ncurl=7\n" {
		t.Errorf("session without egress: %+v", res)
	}

	for _, id := range []string{withEg.ID, without.ID} {
		if code := do("DELETE", "/sessions/"+id, "", nil); code != 204 {
			t.Errorf("DELETE %s: %d", id, code)
		}
		deleted[id] = true
	}
	// What the sessions held is gone while the daemon still runs (its
	// worker's watchdog stays: the full Check runs at cleanup).
	if m := testenv.MountsUnder(in.StateDir); len(m) > 0 {
		t.Errorf("mounts left after DELETE: %v", m)
	}
	for _, d := range []string{"workspaces", "netns"} {
		if ents, _ := os.ReadDir(filepath.Join(in.StateDir, d)); len(ents) > 0 {
			t.Errorf("%d entries left in %s after DELETE", len(ents), d)
		}
	}
	if p := testenv.ProcsInCgroup(filepath.Base(in.Parent)); len(p) > 0 {
		t.Errorf("processes left after DELETE: %v", p)
	}
	if s := testenv.Slots(in.StateDir); len(s) > 0 {
		t.Errorf("uid slots left after DELETE: %v", s)
	}

	checkEgressRecords(t, base, audit,
		[]string{`jaild_egress_connections_total{result="allowed"} 3`, `jaild_egress_connections_total{result="denied"} 1`},
		[]string{
			`"session_id":"` + withEg.ID + `","caller":"`,
			`"verdict":"egress_denied","reason":"denied.test:80 is not in the egress allowlist"`,
		})
}
