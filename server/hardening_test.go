package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// TestHostOrigin: a browser page that reached the daemon through DNS
// rebinding (its own name in Host, its own page in Origin) gets 403 on
// every endpoint, and nothing runs; loopback names, IP addresses and the
// configured names pass.
func TestHostOrigin(t *testing.T) {
	f := &fake{}
	var audit syncBuffer
	ts := start(t, server.Options{Runner: server.Direct(f), AllowedHosts: []string{"jaild.internal"},
		AllowedOrigins: []string{"https://app.example.com"}, Audit: run.NewAuditLog(&audit, run.AuditOptions{}),
		MCP: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })})
	do := func(method, path string, hdr ...string) int {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(`{"command":"id"}`))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	endpoints := []struct{ method, path string }{
		{"POST", "/run"}, {"POST", "/raw"}, {"GET", "/metrics"}, {"GET", "/healthz"}, {"GET", "/openapi.yaml"}, {"POST", "/mcp"},
	}
	refused := [][]string{
		{"Host", "attacker.example:8080", "Origin", "http://attacker.example:8080"},
		{"Host", "attacker.example"},
		{"Host", "127.0.0.1.attacker.example"},
		{"Host", "localhost.attacker.example"},
		{"Origin", "http://attacker.example:8080"},
		{"Origin", "null"},
		{"Host", "jaild.internal", "Origin", "https://jaild.internal.attacker.example"},
	}
	for _, e := range endpoints {
		for _, h := range refused {
			if got := do(e.method, e.path, h...); got != http.StatusForbidden {
				t.Errorf("%s %s %v: status %d, want 403", e.method, e.path, h, got)
			}
		}
	}
	if n := len(f.Calls()); n != 0 {
		t.Fatalf("refused requests ran %d commands", n)
	}
	allowed := [][]string{
		{},
		{"Host", "localhost:8080"},
		{"Host", "dev.localhost"},
		{"Host", "127.0.0.1:9"},
		{"Host", "[::1]:8080"},
		{"Host", "10.1.2.3:8080"},
		{"Host", "JAILD.internal:8080"},
		{"Origin", "http://localhost:3000"},
		{"Origin", "http://127.0.0.1:3000"},
		{"Origin", "https://app.example.com"},
	}
	for _, h := range allowed {
		if got := do("POST", "/run", h...); got != http.StatusOK {
			t.Errorf("POST /run %v: status %d, want 200", h, got)
		}
	}
	if v := metric(t, ts, `jaild_requests_rejected_total{reason="forbidden"}`); v != float64(len(endpoints)*len(refused)) {
		t.Errorf("rejected forbidden = %v, want %d", v, len(endpoints)*len(refused))
	}
	if n := bytes.Count(audit.Bytes(), []byte(`"reason":"forbidden"`)); n != len(endpoints)*len(refused) {
		t.Errorf("%d forbidden audit records, want %d", n, len(endpoints)*len(refused))
	}
}

// TestAuditRejections: requests refused before they become runs are in the
// audit log too, each with its reason, status and request id.
func TestAuditRejections(t *testing.T) {
	var audit syncBuffer
	log := run.NewAuditLog(&audit, run.AuditOptions{})
	r, err := run.Chain(&fake{}, run.ChainOptions{Max: run.Maxima{Limits: box.Limits{Pids: 10}}, Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := server.ParseTokens(strings.NewReader("alice:" + strings.Repeat("a", 20)))
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, server.Options{Runner: r, Audit: log, MaxBodyBytes: 100, Tokens: tokens})
	auth := "Bearer " + strings.Repeat("a", 20)
	cases := []struct {
		body, ctype string
		verdict     string
		reason      string
		status      int
	}{
		{`{"command":`, "application/json", api.VerdictRejected, "bad_json", 400},
		{`{"command":"ls"}`, "text/plain", api.VerdictRejected, "unsupported_media_type", 415},
		{`{"command":"` + strings.Repeat("x", 200) + `"}`, "application/json", api.VerdictRejected, "too_large", 413},
		{`{"command":""}`, "application/json", api.VerdictRejected, "invalid", 400},
		{`{"command":"ls","pids":11}`, "application/json", api.VerdictInvalid, "", 0},
		{`{"command":"ls"}`, "application/json", api.VerdictRejected, "unauthorized", 401},
	}
	for i, c := range cases {
		hdr := []string{"Content-Type", c.ctype, "Authorization", auth}
		if i == len(cases)-1 {
			hdr = hdr[:2]
		}
		resp, body := post(t, ts.URL+"/run", c.body, hdr...)
		if resp.StatusCode/100 != 4 {
			t.Fatalf("%s: status %d: %s", c.body, resp.StatusCode, body)
		}
	}
	eventually(t, "an audit record per refusal", func() bool { return bytes.Count(audit.Bytes(), []byte("\n")) == len(cases) })
	for i, line := range bytes.Split(bytes.TrimSpace(audit.Bytes()), []byte("\n")) {
		var rec api.AuditRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		c := cases[i]
		if rec.Verdict != c.verdict || rec.Reason != c.reason || rec.Status != c.status || rec.RequestID == "" || rec.Caller == "" || rec.Error == "" {
			t.Errorf("record %d: %s", i, line)
		}
	}
}

// TestRunOutputStreamed: a result of control bytes and of bytes that are
// not UTF-8 comes back exactly, with a Content-Length that matches.
func TestRunOutputStreamed(t *testing.T) {
	ctrl := strings.Repeat("\x01\x00\"\\\n", 100000)
	bin := "ok\xff\xfe" + strings.Repeat("\x80", 1000) + "é"
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		return &box.Result{ID: "sb", Stdout: ctrl, Stderr: bin, StdoutBytes: int64(len(ctrl)), StderrBytes: int64(len(bin))}, nil
	}}
	ts := start(t, server.Options{Runner: server.Direct(f)})
	resp, body := post(t, ts.URL+"/run", `{"command":"x"}`)
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) {
		t.Fatalf("status %d, Content-Length %d, body %d bytes", resp.StatusCode, resp.ContentLength, len(body))
	}
	var got api.Response
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Stdout != ctrl || got.StdoutB64 != nil {
		t.Errorf("stdout of control bytes changed (%d bytes, b64 %d)", len(got.Stdout), len(got.StdoutB64))
	}
	if string(got.StderrB64) != bin || got.Stderr != "" {
		t.Errorf("stderr %q b64 %q", got.Stderr, got.StderrB64)
	}
}

// TestRawExitNotTruncated: /raw streams every byte, so its exit event never
// says output was cut, whatever the jail kept.
func TestRawExitNotTruncated(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		s.Stdout.Write([]byte("all of it\n"))
		return &box.Result{ID: "sb", StdoutBytes: 10, StdoutTruncated: true, StderrTruncated: true}, nil
	}}
	ts := start(t, server.Options{Runner: server.Direct(f)})
	_, body := post(t, ts.URL+"/raw", `{"command":"x"}`)
	evs := events(t, body)
	last := evs[len(evs)-1]
	if last.Event != api.EventExit || last.Verdict == nil || last.StdoutTruncated || last.StderrTruncated {
		t.Errorf("exit event %s", body)
	}
}

// TestRetryAfterEstimate: Retry-After follows the queue ahead and the
// recent runs' duration instead of always saying 1.
func TestRetryAfterEstimate(t *testing.T) {
	g := newGate()
	defer g.Open()
	first := true
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		if first {
			first = false
			time.Sleep(1500 * time.Millisecond)
			return okResult(""), nil
		}
		return g.Run(ctx, s)
	}}
	m := run.NewMetrics()
	ts := start(t, server.Options{Runner: chain(t, f, m, nil, run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 2, MaxWait: time.Hour}), Metrics: m})
	post(t, ts.URL+"/run", `{"executable":"x"}`) // a 1.5 s run sets the pace
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	server.Recv(t, g.Entered, "the blocking run")
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	eventually(t, "two runs queued", func() bool { return metric(t, ts, "jaild_queue_depth") == 2 })
	resp, body := post(t, ts.URL+"/run", `{"executable":"x"}`)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	// Two queued plus this one at 1.5 s each through one slot: 4.5 s.
	if resp.StatusCode != 429 || ra < 4 || ra > 6 {
		t.Errorf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestQueueAbandoned: a caller that gives up while queued is counted.
func TestQueueAbandoned(t *testing.T) {
	g := newGate()
	defer g.Open()
	m := run.NewMetrics()
	ts := start(t, server.Options{Runner: chain(t, &fake{Fn: g.Run}, m, nil, run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Hour}), Metrics: m})
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	server.Recv(t, g.Entered, "the blocking run")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/run", strings.NewReader(`{"executable":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := httpc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually(t, "a run queued", func() bool { return metric(t, ts, "jaild_queue_depth") == 1 })
	cancel()
	server.Recv(t, errc, "the client to give up")
	eventually(t, "the abandoned wait counted", func() bool { return metric(t, ts, "jaild_queue_abandoned_total") == 1 })
}

// TestOutputMemory: runs hold twice their output cap from admission until
// their answer is written; beyond --max-output-memory they queue, and a run
// that could never fit is refused.
func TestOutputMemory(t *testing.T) {
	g := newGate()
	defer g.Open()
	a, err := run.Admit(server.Direct(&fake{Fn: g.Run}), run.AdmitOptions{MaxConcurrent: 8, MaxQueue: 8, MaxWait: time.Hour, MaxOutputMemory: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	spec := func() *jail.Spec {
		return &jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 1 << 20}}
	}
	done := make(chan error, 3)
	for range 3 {
		go func() { _, err := a.Run(context.Background(), run.Request{Spec: spec()}); done <- err }()
	}
	// Two runs of 2 MiB fit in 5 MiB; the third waits although slots
	// are free.
	server.Recv(t, g.Entered, "a run")
	server.Recv(t, g.Entered, "a run")
	eventually(t, "the third run queued", func() bool { return a.Queued() == 1 })
	if held, max := a.OutputMemory(); held != 4<<20 || max != 5<<20 {
		t.Errorf("output memory %d of %d", held, max)
	}
	if _, err := a.Run(context.Background(), run.Request{Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 3 << 20}}}); !box.IsInvalid(err) {
		t.Errorf("a run needing more than all the output memory: %v", err)
	}
	g.Open()
	for range 3 {
		if err := server.Recv(t, done, "a run to end"); err != nil {
			t.Error(err)
		}
	}
	if held, _ := a.OutputMemory(); held != 0 {
		t.Errorf("%d bytes still held", held)
	}
}

// TestOutputHeldUntilWritten: over HTTP the output memory is let go after
// the answer is written, not when the run ends.
func TestOutputHeldUntilWritten(t *testing.T) {
	var adm *run.Admitter
	var heldDuring int64
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		return okResult("x"), nil
	}}
	adm, err := run.Admit(server.Direct(f), run.AdmitOptions{MaxOutputMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	probe := runnerFunc(func(ctx context.Context, req run.Request) (*box.Result, error) {
		res, err := adm.Run(ctx, req)
		heldDuring, _ = adm.OutputMemory()
		return res, err
	})
	ts := start(t, server.Options{Runner: probe})
	if resp, body := post(t, ts.URL+"/run", `{"command":"x","max_output_bytes":1000}`); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if heldDuring != 2000 {
		t.Errorf("held %d bytes after the run returned, want 2000 until the answer is written", heldDuring)
	}
	eventually(t, "the memory let go", func() bool { h, _ := adm.OutputMemory(); return h == 0 })
}

// runnerFunc is a run.Runner that hands each request to the function, and
// refuses background starts.
type runnerFunc func(ctx context.Context, req run.Request) (*box.Result, error)

func (f runnerFunc) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	return f(ctx, req)
}

func (runnerFunc) Start(context.Context, run.Request) (string, error) {
	return "", server.ErrNoSessions
}

// TestInternalErrorHidesDetail: a 500 names the request id, never the
// error's text (host paths, kernel messages).
func TestInternalErrorHidesDetail(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		return nil, errors.New("mkdir /run/jaild/secret-path: permission denied")
	}}
	ts := start(t, server.Options{Runner: server.Direct(f)})
	resp, body := post(t, ts.URL+"/run", `{"command":"x"}`)
	e := decodeError(t, body)
	if resp.StatusCode != 500 || e.Code != api.CodeInternal || strings.Contains(string(body), "/run/jaild") ||
		!strings.Contains(e.Error, resp.Header.Get("X-Request-Id")) {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}
