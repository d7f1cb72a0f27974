package server_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// policyServer serves a chain that asks the policy set in dir, with an
// audit log.
func policyServer(t *testing.T, dir string) (*testServer, *fake, *syncBuffer) {
	t.Helper()
	e, err := policy.Open(policy.Options{Dir: dir, NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	f := &fake{}
	var audit syncBuffer
	log := run.NewAuditLog(&audit, run.AuditOptions{})
	r, err := run.Chain(f, run.ChainOptions{Audit: log, Policy: e})
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, server.Options{Runner: r, Audit: log, Policy: func() (string, bool) {
		st := e.Status()
		return st.Error, !st.DenyAll
	}})
	return ts, f, &audit
}

// TestPolicy: the policy decides every run before anything is built, shell
// strings included, and a denial is a 403 in the convention's words,
// audited.
func TestPolicy(t *testing.T) {
	ts, f, audit := policyServer(t, "../examples/policy")
	cases := []struct {
		body   string
		status int
		msg    string
	}{
		{`{"executable":"echo","args":["hi"]}`, 200, ""},
		{`{"command":"echo ok"}`, 200, ""},
		{`{"executable":"rm","args":["-rf","/"]}`, 403, "Command not allowed: rm"},
		{`{"executable":"echo","args":["--unsafe"]}`, 403, "Command not allowed: echo"},
		{`{"command":"echo ok; rm -rf /"}`, 403, "Command not allowed: "},
		{`{"command":"echo $(rm -rf /)"}`, 403, "Command not allowed: "},
		{`{"command":"x=rm; $x -rf /"}`, 403, "Command not allowed: "},
		{`{"executable":"no-such-command"}`, 403, "Failed to resolve executable path for 'no-such-command'"},
	}
	for _, c := range cases {
		for _, path := range []string{"/run", "/raw"} {
			resp, body := post(t, ts.URL+path, c.body)
			if resp.StatusCode != c.status {
				t.Errorf("%s %s: status %d, want %d: %s", path, c.body, resp.StatusCode, c.status, body)
				continue
			}
			if c.status != 200 {
				checkDenial(t, path, body, c.msg)
			}
		}
	}
	if n := len(f.Calls()); n != 4 {
		t.Errorf("%d runs reached the jail, want the 4 allowed ones", n)
	}
	if n := bytes.Count(audit.Bytes(), []byte(`"verdict":"denied"`)); n != 12 {
		t.Errorf("%d denials audited, want 12:\n%s", n, audit.Bytes())
	}
	_, body := get(t, ts.URL+"/healthz")
	var h api.Health
	if json.Unmarshal(body, &h); h.Status != "ok" {
		t.Errorf("/healthz %s", body)
	}
}

// TestPolicyDenyAll: a policy set that does not load denies everything,
// and /healthz says so.
func TestPolicyDenyAll(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/main.rego", "package sandbox.main\nallow if {") // does not parse
	ts, f, _ := policyServer(t, dir)
	for _, path := range []string{"/run", "/raw"} {
		resp, body := post(t, ts.URL+path, `{"executable":"echo"}`)
		if resp.StatusCode != 403 {
			t.Errorf("%s: status %d: %s", path, resp.StatusCode, body)
		}
		checkDenial(t, path, body, "Policy deny-all is active: parse main.rego")
	}
	if resp, body := get(t, ts.URL+"/healthz"); resp.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"policy"`)) {
		t.Errorf("/healthz in deny-all: %d %s", resp.StatusCode, body)
	}
	if len(f.Calls()) != 0 {
		t.Error("a run reached the jail under deny-all")
	}
}

// checkDenial checks a policy denial's body: the policy-runner
// convention's {"error":"policy_denied","message":...} with the daemon's
// code, and nothing else; on /raw also an error event of that convention,
// {"event":"error","message":...}, which the same line is.
func checkDenial(t *testing.T, path string, body []byte, msgPrefix string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: denial %q: %v", path, body, err)
	}
	keys := []string{"code", "error", "message"}
	if path == "/raw" {
		keys = []string{"code", "error", "event", "message"}
		if m["event"] != "error" {
			t.Errorf("%s: event %v, want error", path, m["event"])
		}
	}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, keys) {
		t.Errorf("%s: denial keys %v, want %v: %s", path, got, keys, body)
	}
	msg, _ := m["message"].(string)
	if m["error"] != "policy_denied" || m["code"] != api.CodePolicyDenied || !strings.HasPrefix(msg, msgPrefix) {
		t.Errorf("%s: denial %s, want policy_denied and a message starting %q", path, body, msgPrefix)
	}
	if e := decodeError(t, body); e.Text() != msg {
		t.Errorf("%s: ErrorResponse.Text() %q, want the message %q", path, e.Text(), msg)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
