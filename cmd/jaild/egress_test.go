package main

import (
	"encoding/json"
	"fmt"
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

func helloUpstream(t *testing.T) *testenv.Upstream {
	return testenv.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from upstream host=%s\n", r.Host)
	}))
}

// TestRunEgress: jaild run --egress-allow (served by jaild-server run,
// which the lean jaild executes) reaches an allowed name and nothing else,
// and reports the proxy's counters.
func TestRunEgress(t *testing.T) {
	in := newInstall(t)
	up := helloUpstream(t)
	cmd := in.cmd("run", "--json", "--egress-allow", "up.test:80", "--egress-resolve", "up.test="+up.Addr.String(),
		"--shell", "curl -sS http://up.test/; curl -s http://other.test/")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jaild run: %v: %s", err, out)
	}
	var res api.Response
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	want := "hello from upstream host=up.test\njaild egress: other.test:80 is not in the egress allowlist\n"
	n := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	if res.Stdout != want || n(res.EgressConnections) != 1 || n(res.EgressDenied) != 1 || n(res.EgressBytesIn) <= 0 {
		t.Errorf("got %+v, want stdout %q, 1 connection and 1 denied", res, want)
	}
	// Without the flag the sandbox has no proxy and no network.
	out, _ = in.cmd("run", "--shell", `echo "[$HTTP_PROXY]"; curl -sS --max-time 5 http://`+up.Addr.String()+"/ 2>&1 >/dev/null | grep -c 'connect'").Output()
	if string(out) != "[]\n1\n" {
		t.Errorf("run without egress: %q", out)
	}
}

// TestServeEgress: the daemon's worker passes each run's proxy listener to
// the front end, which serves it with the request's grant, audits every
// decision and counts it in /metrics.
func TestServeEgress(t *testing.T) {
	in := newInstall(t)
	up := helloUpstream(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	addr, _ := startServe(t, in, false, "--egress-allow", "up.test:80", "--egress-allow", "also.test:80",
		"--egress-resolve", "up.test="+up.Addr.String()+",also.test="+up.Addr.String(), "--audit-log", audit)
	post := func(body string) (int, string) {
		resp, err := http.Post("http://"+addr+"/run", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fetch := `curl -s http://up.test/; curl -s http://also.test/; curl -s http://other.test/`
	tests := []struct {
		name     string
		egress   string
		wantCode int
		want     []string
	}{
		{"operator's list", `true`, 200, []string{"hello from upstream host=up.test", "hello from upstream host=also.test", "other.test:80 is not in the egress allowlist", `"egress_connections":2`, `"egress_denied":1`}},
		{"narrowed", `["up.test:80"]`, 200, []string{"hello from upstream host=up.test", "also.test:80 is not in this request's egress list", `"egress_connections":1`, `"egress_denied":2`}},
		{"beyond the operator's list", `["other.test:80"]`, 400, []string{"other.test:80 is not within the operator's allowlist"}},
		{"none", `false`, 200, []string{`"stdout":""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(fmt.Sprintf(`{"command":%q,"egress":%s}`, fetch, tt.egress))
			if code != tt.wantCode {
				t.Fatalf("status %d: %s", code, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %q: %s", w, body)
				}
			}
			if tt.egress == "false" && strings.Contains(body, "egress_") {
				t.Errorf("a run without egress has egress counters: %s", body)
			}
		})
	}
	// jaild remote --egress narrows too, streaming through /raw.
	code, stdout, stderr := remote(t, false, nil, "--server", "http://"+addr, "--egress", "up.test:80", "--shell", "curl -s http://up.test/; curl -s http://also.test/")
	if code != 0 || stdout != "hello from upstream host=up.test\njaild egress: also.test:80 is not in this request's egress list\n" {
		t.Errorf("jaild remote --egress: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	checkEgressRecords(t, "http://"+addr, audit,
		[]string{`jaild_egress_connections_total{result="allowed"} 4`, `jaild_egress_connections_total{result="denied"} 4`},
		[]string{`"verdict":"egress_denied","reason":"other.test:80 is not in the egress allowlist","egress_host":"other.test","egress_port":80`, `"verdict":"egress_allowed"`, `"egress_connections":2`})
}

// checkEgressRecords checks the daemon's /metrics at base and the audit log
// file for the lines of an egress test: metrics and audit each hold every
// string of theirs.
func checkEgressRecords(t *testing.T, base, audit string, metrics, records []string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range metrics {
		if !strings.Contains(string(m), w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	log, _ := os.ReadFile(audit)
	for _, w := range records {
		if !strings.Contains(string(log), w) {
			t.Errorf("audit log lacks %s:\n%s", w, log)
		}
	}
}

// TestEgressFlagsChecked: bad egress flags stop serve and mcp at start,
// before a worker or a sandbox exists, with the flag named; flags that would
// grant egress when nothing is allowed are such a mistake.
func TestEgressFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--egress-allow", "nohost"}, "--egress-allow"},
		{[]string{"mcp", "--egress-default", "maybe", "--egress-allow", "a.test:443"}, "--egress-default"},
		{[]string{"serve", "--egress-token-allow", "=a.test:443"}, "--egress-token-allow"},
		{[]string{"mcp", "--mcp-egress"}, "--mcp-egress: no destination is allowed"},
		{[]string{"serve", "--egress-default", "on"}, "--egress-default on: no destination is allowed"},
	} {
		state := t.TempDir()
		cmd := exec.Command(jaildBin, append(tc.args, "--state-dir", state)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if exitCode(err) != api.ExitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tc.args, exitCode(err), api.ExitUsage, tc.want, out)
		}
		if ents, _ := os.ReadDir(state); len(ents) != 0 {
			t.Errorf("%v: the state dir has %d entries: something was built before the flags were checked", tc.args, len(ents))
		}
	}
}
