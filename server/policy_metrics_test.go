package server_test

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// scrape returns /metrics's samples whose name starts with prefix, as
// "name{labels}" -> value text.
func scrape(t *testing.T, url, prefix string) map[string]string {
	t.Helper()
	_, body := get(t, url+"/metrics")
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		out[l[:i]] = l[i+1:]
	}
	return out
}

// TestPolicyMetrics: the engine's Observer feeds /metrics: decisions by
// result and mode, the evaluation latency, the active revision, and
// deny-all through an invalid edit and back.
func TestPolicyMetrics(t *testing.T) {
	dir := t.TempDir()
	router := "package sandbox.main\n\nallow if input.command == \"echo\"\n"
	writeFile(t, dir+"/main.rego", router)
	m := run.NewMetrics()
	e, err := policy.Open(policy.Options{Dir: dir, Observer: m.PolicyObserver(), Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r, err := run.Chain(&fake{}, run.ChainOptions{Policy: e, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, server.Options{Runner: r, Metrics: m})

	rev1 := e.Status().Revision
	post(t, ts.URL+"/run", `{"executable":"echo","args":["hi"]}`)
	post(t, ts.URL+"/run", `{"executable":"date"}`)
	post(t, ts.URL+"/run", `{"executable":"date"}`)
	got := scrape(t, ts.URL, "jaild_policy_")
	want := map[string]string{
		`jaild_policy_decisions_total{mode="enforce",result="allow"}`:         "1",
		`jaild_policy_decisions_total{mode="enforce",result="deny"}`:          "2",
		`jaild_policy_decisions_total{mode="enforce",result="resolve_error"}`: "0",
		`jaild_policy_decisions_total{mode="shadow",result="deny"}`:           "0",
		`jaild_policy_eval_seconds_count`:                                     "3",
		`jaild_policy_revision{revision="` + rev1 + `"}`:                      "1",
		`jaild_policy_deny_all`:                                               "0",
		`jaild_policy_loads_total{result="ok"}`:                               "1",
		`jaild_policy_loads_total{result="error"}`:                            "0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}

	// An invalid edit: deny-all, and no revision is active.
	writeFile(t, dir+"/main.rego", "package sandbox.main\nallow if {")
	eventually(t, "deny-all in /metrics", func() bool {
		return scrape(t, ts.URL, "jaild_policy_deny_all")["jaild_policy_deny_all"] == "1"
	})
	post(t, ts.URL+"/run", `{"executable":"echo"}`)
	got = scrape(t, ts.URL, "jaild_policy_")
	for k := range got {
		if strings.HasPrefix(k, "jaild_policy_revision{") {
			t.Errorf("a revision in deny-all: %s", k)
		}
	}
	if got[`jaild_policy_decisions_total{mode="enforce",result="deny_all"}`] != "1" {
		t.Errorf("deny_all decisions: %v", got)
	}

	// A valid edit: the new revision, deny-all off.
	writeFile(t, dir+"/main.rego", router+"\n# edited\n")
	eventually(t, "recovery in /metrics", func() bool {
		return scrape(t, ts.URL, "jaild_policy_deny_all")["jaild_policy_deny_all"] == "0"
	})
	rev2 := e.Status().Revision
	got = scrape(t, ts.URL, "jaild_policy_revision")
	if rev2 == rev1 || len(got) != 1 || got[`jaild_policy_revision{revision="`+rev2+`"}`] != "1" {
		t.Errorf("revision after recovery (was %s, now %s): %v", rev1, rev2, got)
	}
}
