package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/worker"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// chain is the daemon's runner chain around base with small maxima.
func chain(t *testing.T, base run.Base, m *run.Metrics, audit io.Writer, adm run.AdmitOptions) run.Runner {
	t.Helper()
	var log *run.AuditLog
	if audit != nil {
		log = run.NewAuditLog(audit, run.AuditOptions{})
	}
	r, err := run.Chain(base, run.ChainOptions{
		Max: run.Maxima{
			Limits:    box.Limits{Memory: 512 << 20, Pids: 100, CPUs: 1, TmpfsSize: 128 << 20},
			Timeout:   30 * time.Second,
			MaxOutput: 1 << 20,
		},
		Admission: adm,
		Audit:     log,
		Metrics:   m,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBadInput sends every kind of bad request to both endpoints: each gets
// its own status and error code, and none reaches the runner.
func TestBadInput(t *testing.T) {
	f := &fake{}
	m := run.NewMetrics()
	ts := start(t, server.Options{Runner: chain(t, f, m, nil, run.AdmitOptions{}), Metrics: m, MaxBodyBytes: 4096})

	tests := []struct {
		name      string
		body      string
		hdr       []string
		status    int
		code      string
		wantField string
	}{
		{name: "malformed JSON", body: `{"command": "ls"`, status: 400, code: api.CodeBadJSON},
		{name: "empty body", body: ``, status: 400, code: api.CodeBadJSON},
		{name: "unknown field", body: `{"command":"ls","sudo":true}`, status: 400, code: api.CodeBadJSON},
		{name: "two objects", body: `{"command":"ls"}{"command":"ls"}`, status: 400, code: api.CodeBadJSON},
		{name: "wrong type", body: `{"command":["ls"]}`, status: 400, code: api.CodeBadJSON},
		{name: "duplicate key", body: `{"command":"true","command":"id"}`, status: 400, code: api.CodeBadJSON},
		{name: "empty command", body: `{"command":""}`, status: 400, code: api.CodeInvalid, wantField: "command"},
		{name: "no command at all", body: `{}`, status: 400, code: api.CodeInvalid, wantField: "command"},
		{name: "blank command", body: `{"command":"   "}`, status: 400, code: api.CodeInvalid, wantField: "command"},
		{name: "empty executable", body: `{"executable":"","args":["x"]}`, status: 400, code: api.CodeInvalid, wantField: "command"},
		{name: "NUL in command", body: `{"command":"ls\u0000 /"}`, status: 400, code: api.CodeInvalid, wantField: "command"},
		{name: "NUL in args", body: `{"executable":"ls","args":["\u0000"]}`, status: 400, code: api.CodeInvalid, wantField: "args"},
		{name: "NUL in env", body: `{"command":"ls","env":{"A":"\u0000"}}`, status: 400, code: api.CodeInvalid, wantField: "env"},
		{name: "oversized body", body: `{"command":"` + strings.Repeat("x", 5000) + `"}`, status: 413, code: api.CodeTooLarge},
		{name: "negative timeout", body: `{"command":"ls","timeout_seconds":-5}`, status: 400, code: api.CodeInvalid, wantField: "timeout_seconds"},
		{name: "huge timeout", body: `{"command":"ls","timeout_seconds":99999999999999}`, status: 400, code: api.CodeInvalid, wantField: "timeout_seconds"},
		{name: "overflowing timeout", body: `{"command":"ls","timeout_ms":1e400}`, status: 400, code: api.CodeBadJSON},
		{name: "timeout above the operator's maximum", body: `{"command":"ls","timeout_seconds":31}`, status: 400, code: api.CodeInvalid, wantField: "timeout_seconds"},
		{name: "memory above max", body: `{"command":"ls","memory_bytes":1073741824}`, status: 400, code: api.CodeInvalid, wantField: "memory_bytes"},
		{name: "pids above max", body: `{"command":"ls","pids":101}`, status: 400, code: api.CodeInvalid, wantField: "pids"},
		{name: "cpus above max", body: `{"command":"ls","cpus":1.5}`, status: 400, code: api.CodeInvalid, wantField: "cpus"},
		{name: "tmpfs above max", body: `{"command":"ls","tmpfs_size_bytes":1073741824}`, status: 400, code: api.CodeInvalid, wantField: "tmpfs_size_bytes"},
		{name: "output above max", body: `{"command":"ls","max_output_bytes":2097152}`, status: 400, code: api.CodeInvalid, wantField: "max_output_bytes"},
		{name: "cwd outside", body: `{"command":"ls","cwd":"/etc"}`, status: 400, code: api.CodeInvalid, wantField: "cwd"},
		{name: "text/plain", body: `{"command":"ls"}`, hdr: []string{"Content-Type", "text/plain"}, status: 415, code: api.CodeUnsupportedMedia},
		{name: "form", body: `command=ls`, hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, status: 415, code: api.CodeUnsupportedMedia},
		{name: "no content type", body: `{"command":"ls"}`, hdr: []string{"Content-Type", ""}, status: 415, code: api.CodeUnsupportedMedia},
		{name: "garbled content type", body: `{"command":"ls"}`, hdr: []string{"Content-Type", "application/json; ==="}, status: 415, code: api.CodeUnsupportedMedia},
		{name: "latin-1 charset", body: `{"command":"ls"}`, hdr: []string{"Content-Type", "application/json; charset=iso-8859-1"}, status: 415, code: api.CodeUnsupportedMedia},
		// encoding/json alone would run these with U+FFFD in place.
		{name: "invalid UTF-8", body: "{\"command\":\"echo \xff\"}", status: 400, code: api.CodeBadJSON},
		{name: "lone high surrogate", body: `{"command":"echo \ud800"}`, status: 400, code: api.CodeBadJSON},
		{name: "lone low surrogate", body: `{"command":"echo \udc00x"}`, status: 400, code: api.CodeBadJSON},
		{name: "high surrogate then other escape", body: `{"command":"echo \ud83d\u0041"}`, status: 400, code: api.CodeBadJSON},
		{name: "stdin_b64 as numbers", body: `{"command":"cat","stdin_b64":[104,105]}`, status: 400, code: api.CodeBadJSON},
		{name: "stdin_b64 not base64", body: `{"command":"cat","stdin_b64":"!!"}`, status: 400, code: api.CodeBadJSON},
	}
	for _, path := range []string{"/run", "/raw"} {
		for _, tt := range tests {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				resp, body := post(t, ts.URL+path, tt.body, tt.hdr...)
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tt.status, body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				e := decodeError(t, body)
				if e.Code != tt.code || e.Field != tt.wantField || e.Error == "" {
					t.Errorf("answer %+v, want code %q field %q and a message", e, tt.code, tt.wantField)
				}
			})
		}
	}
	if n := len(f.Calls()); n != 0 {
		t.Errorf("the runner was called %d times for bad requests", n)
	}
	if v := metric(t, ts, `jaild_requests_rejected_total{reason="bad_json"}`); v != 26 {
		t.Errorf("rejected bad_json = %v, want 26", v)
	}
	for _, body := range []string{`{"command":"echo \ud83d\ude00 \\ud800"}`, `{"command":"cat","stdin_b64":"aGk="}`} {
		if resp, answer := post(t, ts.URL+"/run", body); resp.StatusCode != 200 {
			t.Errorf("%s: status %d: %s", body, resp.StatusCode, answer)
		}
	}
	if c := f.Calls(); len(c) != 2 || c[0].Args[2] != "echo \U0001F600 \\ud800" {
		t.Errorf("valid surrogate pair or escaped backslash misread: %+v", c)
	}

	t.Run("charset parameter accepted", func(t *testing.T) {
		resp, body := post(t, ts.URL+"/run", `{"command":"ls"}`, "Content-Type", "application/json; charset=utf-8")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("wrong method", func(t *testing.T) {
		resp, _ := get(t, ts.URL+"/run")
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /run: status %d", resp.StatusCode)
		}
	})
}

func TestRun(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		in, _ := io.ReadAll(s.Stdin)
		return &box.Result{ID: "sb-7", ExitCode: 3, Stdout: "out:" + string(in), Stderr: "err\xff", StdoutBytes: 7,
			StderrBytes: 4, TimedOut: true, OOMKilled: true, PidsLimitHit: true, StdoutTruncated: true,
			Duration: 12 * time.Millisecond, CPUTime: 5 * time.Millisecond, MemoryPeak: 1 << 20}, nil
	}}
	ts := start(t, server.Options{Runner: chain(t, f, nil, nil, run.AdmitOptions{})})
	resp, body := post(t, ts.URL+"/run", `{"command":"cat; exit 3","timeout_seconds":5,"stdin":"hi","env":{"Z":"1","A":"2"},"cwd":"/tmp","pids":50}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("status %d, request id %q: %s", resp.StatusCode, resp.Header.Get("X-Request-Id"), body)
	}
	// Decode strictly into the documented shape: no undocumented fields.
	var got api.Response
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	// Output that is not UTF-8 comes exactly, in base64, instead of text.
	want := api.Response{Stdout: "out:hi", Stderr: "", StderrB64: []byte("err\xff"), ExitCode: 3, Verdict: api.Verdict{
		ID: "sb-7", StdoutTruncated: true, TimedOut: true, OOMKilled: true, PidsLimitHit: true,
		Usage: api.Usage{StdoutBytes: 7, StderrBytes: 4, DurationMS: 12, CPUMS: 5, MemoryPeakBytes: 1 << 20}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("answer\n got %+v\nwant %+v", got, want)
	}
	// The common /run field names are there verbatim.
	for _, k := range []string{`"stdout":`, `"stderr":`, `"exit_code":`, `"duration_ms":`} {
		if !bytes.Contains(body, []byte(k)) {
			t.Errorf("answer lacks %s: %s", k, body)
		}
	}
	calls := f.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	s := calls[0]
	wantLimits := box.Limits{Memory: box.DefaultMemory, Pids: 50, CPUs: 1, TmpfsSize: box.DefaultTmpfsSize}
	if !slices.Equal(s.Args, []string{"/bin/sh", "-c", "cat; exit 3"}) || !slices.Equal(s.Env, []string{"A=2", "Z=1"}) ||
		s.Dir != "/tmp" || s.Timeout != 5*time.Second || s.Limits != wantLimits || s.MaxOutput != box.DefaultMaxOutput {
		t.Errorf("spec %+v", s)
	}
}

// TestRunErrors maps runner errors to statuses and codes.
func TestRunErrors(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{box.ErrCommandNotFound, 422, api.CodeCommandNotFound},
		{fmt.Errorf("exec: %w", box.ErrNotExecutable), 422, api.CodeNotExecutable},
		{box.ErrNotRoot, 500, api.CodeNotRoot},
		{box.ErrUnsupported, 500, api.CodeUnsupported},
		{box.ErrRootfs, 500, api.CodeRootfs},
		{errors.New("boom"), 500, api.CodeInternal},
		{&box.InvalidError{Field: "cwd", Reason: "no"}, 400, api.CodeInvalid},
		{box.ErrBusy, 429, api.CodeBusy},
		{fmt.Errorf("%w: it exited and is being restarted", worker.ErrDown), 503, api.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			f := &fake{Fn: func(context.Context, *jail.Spec) (*box.Result, error) { return nil, tt.err }}
			ts := start(t, server.Options{Runner: server.Direct(f), RetryAfter: 1500 * time.Millisecond})
			for _, path := range []string{"/run", "/raw"} {
				resp, body := post(t, ts.URL+path, `{"executable":"x"}`)
				if resp.StatusCode != tt.status || decodeError(t, body).Code != tt.code {
					t.Errorf("%s: status %d body %s, want %d %s", path, resp.StatusCode, body, tt.status, tt.code)
				}
				want := map[int]string{429: "2", 503: "1"}[tt.status]
				if ra := resp.Header.Get("Retry-After"); ra != want {
					t.Errorf("%s: Retry-After %q, want %q", path, ra, want)
				}
			}
		})
	}
}

// readEvent reads one NDJSON line from r.
func readEvent(t *testing.T, r *bufio.Reader) api.Event {
	t.Helper()
	type res struct {
		line []byte
		err  error
	}
	c := make(chan res, 1)
	go func() { l, err := r.ReadBytes('\n'); c <- res{l, err} }()
	got := server.Recv(t, c, "an event")
	if got.err != nil {
		t.Fatalf("read event: %v (got %q)", got.err, got.line)
	}
	var ev api.Event
	if err := json.Unmarshal(got.line, &ev); err != nil {
		t.Fatalf("event %q: %v", got.line, err)
	}
	return ev
}

// TestRawStreams checks that output reaches the client while the command
// still runs: the fake does not finish before the client has seen its first
// chunks, so a server that buffered until the end would hang this test.
func TestRawStreams(t *testing.T) {
	seen := make(chan struct{})
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		s.Stdout.Write([]byte("hello\n"))
		s.Stderr.Write([]byte{0xff, 0})
		select {
		case <-seen:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.Stdout.Write([]byte("bye\n"))
		return &box.Result{ID: "sb-2", ExitCode: -1, Signal: "SIGKILL", TimedOut: true, StdoutBytes: 10, Duration: 9 * time.Millisecond}, nil
	}}
	ts := start(t, server.Options{Runner: chain(t, f, nil, nil, run.AdmitOptions{})})
	// Bounded: a server that does not flush never even sends the headers.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/raw", strings.NewReader(`{"executable":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	if ev := readEvent(t, br); ev.Event != api.EventStart || ev.RequestID != resp.Header.Get("X-Request-Id") {
		t.Fatalf("first event %+v", ev)
	}
	if ev := readEvent(t, br); ev.Event != api.EventStdout || string(ev.Data) != "hello\n" {
		t.Fatalf("second event %+v", ev)
	}
	if ev := readEvent(t, br); ev.Event != api.EventStderr || !bytes.Equal(ev.Data, []byte{0xff, 0}) {
		t.Fatalf("third event %+v", ev)
	}
	close(seen)
	if ev := readEvent(t, br); ev.Event != api.EventStdout || string(ev.Data) != "bye\n" {
		t.Fatalf("fourth event %+v", ev)
	}
	ev := readEvent(t, br)
	if ev.Event != api.EventExit || ev.ExitCode == nil || *ev.ExitCode != -1 || ev.Verdict == nil ||
		!ev.TimedOut || ev.Signal != "SIGKILL" || ev.ID != "sb-2" || ev.StdoutBytes != 10 {
		t.Fatalf("exit event %+v %+v", ev, ev.Verdict)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("data after the exit event: %q", rest)
	}
}

func TestRawErrorAfterStart(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		s.Stdout.Write([]byte("partial"))
		return nil, fmt.Errorf("start container: %w", box.ErrRootfs)
	}}
	ts := start(t, server.Options{Runner: server.Direct(f)})
	resp, body := post(t, ts.URL+"/raw", `{"executable":"x"}`)
	evs := events(t, body)
	if resp.StatusCode != 200 || len(evs) != 3 {
		t.Fatalf("status %d, events %+v", resp.StatusCode, evs)
	}
	// The detail (host paths, kernel errors) stays in the log; the client
	// gets the request id to quote.
	if last := evs[2]; last.Event != api.EventError || last.Code != api.CodeRootfs ||
		strings.Contains(last.Message, "start container") || !strings.Contains(last.Message, resp.Header.Get("X-Request-Id")) {
		t.Errorf("last event %+v", last)
	}
}

// TestDisconnectCancels: a client that goes away mid-run cancels the run's
// context (which makes the jail kill the sandbox), on both endpoints.
func TestDisconnectCancels(t *testing.T) {
	for _, path := range []string{"/raw", "/run"} {
		t.Run(path, func(t *testing.T) {
			g := newGate()
			f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
				if s.Stdout != nil { // only /raw streams
					s.Stdout.Write([]byte("tick\n"))
				}
				return g.Run(ctx, s)
			}}
			ts := start(t, server.Options{Runner: chain(t, f, nil, nil, run.AdmitOptions{})})
			conn, err := net.Dial("tcp", ts.Addr)
			if err != nil {
				t.Fatal(err)
			}
			body := `{"command":"yes"}`
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
			server.Recv(t, g.Entered, "the run to start")
			if path == "/raw" {
				// Read until the first output arrived, then hang up.
				br := bufio.NewReader(conn)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("read stream: %v", err)
					}
					if strings.Contains(line, `"event":"stdout"`) {
						break
					}
				}
			}
			conn.Close()
			if err := server.Recv(t, g.Ended, "the run to end"); !errors.Is(err, context.Canceled) {
				t.Fatalf("run ended with ctx error %v, want context.Canceled", err)
			}
		})
	}
}

// TestRawStalledReaderCancels: a client that keeps the connection open but
// stops reading is cut off after WriteTimeout, and its run cancelled, rather
// than holding a sandbox until the command's own timeout.
func TestRawStalledReaderCancels(t *testing.T) {
	canceled := make(chan error, 1)
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		chunk := bytes.Repeat([]byte("y\n"), 32<<10)
		for ctx.Err() == nil {
			if _, err := s.Stdout.Write(chunk); err != nil {
				break // the jail keeps draining the pipe; the fake just waits
			}
		}
		<-ctx.Done()
		canceled <- ctx.Err()
		return nil, ctx.Err()
	}}
	ts := start(t, server.Options{Runner: server.Direct(f), WriteTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", ts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"command":"yes"}`
	fmt.Fprintf(conn, "POST /raw HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read: socket buffers fill, the server's write deadline hits.
	if err := server.Recv(t, canceled, "the stalled stream's run to be cancelled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("ctx error %v", err)
	}
}

// TestAdmission: with one slot and a queue of one, a third concurrent run is
// refused with 429 and Retry-After, and a queued run whose wait expires too;
// the admitted and queued runs complete.
func TestAdmission(t *testing.T) {
	g := newGate()
	m := run.NewMetrics()
	ts := start(t, server.Options{
		Runner:  chain(t, &fake{Fn: g.Run}, m, nil, run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Hour}),
		Metrics: m,
	})
	defer g.Open()
	first := postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	second := postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	server.Recv(t, g.Entered, "the first run to start")
	eventually(t, "a run queued", func() bool { return metric(t, ts, "jaild_queue_depth") == 1 })

	for _, path := range []string{"/run", "/raw"} {
		resp, body := post(t, ts.URL+path, `{"executable":"x"}`)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || decodeError(t, body).Code != api.CodeBusy {
			t.Errorf("%s with a full queue: status %d Retry-After %q body %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if v := metric(t, ts, `jaild_requests_rejected_total{reason="busy"}`); v != 2 {
		t.Errorf("rejected busy = %v, want 2", v)
	}
	if v := metric(t, ts, "jaild_sandboxes_running"); v != 1 {
		t.Errorf("sandboxes_running = %v, want 1", v)
	}
	g.Open()
	for _, c := range []<-chan answer{first, second} {
		if a := server.Recv(t, c, "a run to finish"); a.status != 200 {
			t.Errorf("admitted run: status %d: %s %v", a.status, a.body, a.err)
		}
	}
	if v := metric(t, ts, `jaild_runs_total{verdict="ok"}`); v != 2 {
		t.Errorf("runs ok = %v, want 2", v)
	}
}

func TestAdmissionWaitExpires(t *testing.T) {
	g := newGate()
	defer g.Open()
	ts := start(t, server.Options{
		Runner: chain(t, &fake{Fn: g.Run}, nil, nil, run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 5, MaxWait: 10 * time.Millisecond}),
	})
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	server.Recv(t, g.Entered, "the first run to start")
	resp, body := post(t, ts.URL+"/raw", `{"executable":"x"}`)
	if resp.StatusCode != 429 || decodeError(t, body).Code != api.CodeBusy {
		t.Fatalf("queued past MaxWait: status %d %s", resp.StatusCode, body)
	}
}

// TestAdmitterBound hammers an Admitter: never more than MaxConcurrent runs
// are inside at once, and every caller either ran or got ErrBusy.
// trueSpec is a valid spec for tests whose fake does not look at it.
func trueSpec() *jail.Spec { return &jail.Spec{Command: box.Command{Args: []string{"true"}}} }

func TestAdmitterBound(t *testing.T) {
	var mu sync.Mutex
	inside, peak := 0, 0
	base := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		mu.Lock()
		inside++
		peak = max(peak, inside)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inside--
		mu.Unlock()
		return okResult(""), nil
	}}
	a, err := run.Admit(server.Direct(base), run.AdmitOptions{MaxConcurrent: 3, MaxQueue: 4, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok, busy, other int
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.Run(context.Background(), run.Request{Spec: trueSpec()})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, box.ErrBusy):
				busy++
			default:
				other++
			}
		}()
	}
	wg.Wait()
	if peak > 3 || peak == 0 || other != 0 || ok+busy != 200 || ok < 7 {
		t.Errorf("peak %d, ok %d, busy %d, other %d", peak, ok, busy, other)
	}
	if a.Running() != 0 || a.Queued() != 0 {
		t.Errorf("after all runs: running %d queued %d", a.Running(), a.Queued())
	}
}

func TestAdmitterQueuedCallerCancels(t *testing.T) {
	g := newGate()
	defer g.Open()
	a, err := run.Admit(server.Direct(&fake{Fn: g.Run}), run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(context.Background(), run.Request{Spec: trueSpec()})
	server.Recv(t, g.Entered, "the first run")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := a.Run(ctx, run.Request{Spec: trueSpec()}); errc <- err }()
	eventually(t, "the second run queued", func() bool { return a.Queued() == 1 })
	cancel()
	if err := server.Recv(t, errc, "the queued run to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("queued run: %v", err)
	}
	if a.Queued() != 0 {
		t.Errorf("queue depth %d after the caller left", a.Queued())
	}
}

// TestGracefulShutdown: running commands finish within the grace period
// and get their answers; new connections are refused; Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	g := newGate()
	defer g.Open()
	ts := start(t, server.Options{Runner: server.Direct(&fake{Fn: g.Run}), ShutdownGrace: time.Hour})
	var results []<-chan answer
	for range 3 {
		results = append(results, postAsync(t, ts.URL+"/run", `{"executable":"x"}`))
	}
	for range 3 {
		server.Recv(t, g.Entered, "the runs to start")
	}
	ts.stop()
	eventually(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", ts.Addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case <-ts.done:
		t.Fatal("Serve returned while commands were still running")
	default:
	}
	g.Open()
	for _, c := range results {
		if a := server.Recv(t, c, "a run's answer"); a.status != 200 {
			t.Errorf("run during shutdown: status %d %v", a.status, a.err)
		}
	}
	if err := server.Recv(t, ts.done, "Serve to return"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	ts.done <- nil
}

// TestShutdownKillsAfterGrace: commands still running when the grace period
// ends are cancelled (their sandboxes killed), their clients told so, and
// Serve returns once their handlers did.
func TestShutdownKillsAfterGrace(t *testing.T) {
	g := newGate() // never opened: runs end only by cancellation
	ts := start(t, server.Options{Runner: server.Direct(&fake{Fn: g.Run}), ShutdownGrace: 50 * time.Millisecond})
	results := []<-chan answer{
		postAsync(t, ts.URL+"/run", `{"executable":"x"}`),
		postAsync(t, ts.URL+"/raw", `{"executable":"x"}`),
	}
	server.Recv(t, g.Entered, "a run to start")
	server.Recv(t, g.Entered, "a run to start")
	if err := ts.shutdown(t); err != nil {
		t.Errorf("Serve: %v", err)
	}
	for range 2 {
		if err := server.Recv(t, g.Ended, "a run to be cancelled"); !errors.Is(err, context.Canceled) {
			t.Errorf("run ended with %v", err)
		}
	}
	for _, c := range results {
		a := server.Recv(t, c, "an answer")
		switch {
		case a.status == 503:
			if e := decodeError(t, a.body); e.Code != api.CodeShuttingDown {
				t.Errorf("/run answer %+v", e)
			}
		case a.status == 200: // /raw: the stream had started (no admission), so an error event
			evs := events(t, a.body)
			if len(evs) == 0 {
				t.Errorf("/raw: empty stream")
			} else if last := evs[len(evs)-1]; last.Event != api.EventError || last.Code != api.CodeShuttingDown {
				t.Errorf("/raw events %+v", evs)
			}
		default:
			t.Errorf("status %d: %s %v", a.status, a.body, a.err)
		}
	}
}

// TestSlowClients: a client that sends its headers or body too slowly is
// cut off instead of holding a connection (and memory) forever.
func TestSlowClients(t *testing.T) {
	f := &fake{}
	ts := start(t, server.Options{Runner: server.Direct(f), ReadHeaderTimeout: 100 * time.Millisecond, BodyTimeout: 100 * time.Millisecond})
	t.Run("headers", func(t *testing.T) {
		conn, err := net.Dial("tcp", ts.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /run HTTP/1.1\r\nHost: localhost\r\n") // and never the blank line
		conn.SetReadDeadline(time.Now().Add(patience))
		data, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("the server did not close the connection: %v", err)
		}
		if len(data) > 0 && !bytes.Contains(data, []byte("408")) {
			t.Errorf("answer %q", data)
		}
	})
	t.Run("body", func(t *testing.T) {
		conn, err := net.Dial("tcp", ts.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"comm")
		conn.SetReadDeadline(time.Now().Add(patience))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || decodeError(t, body).Code != api.CodeBodyTimeout {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
	if len(f.Calls()) != 0 {
		t.Error("a slow request reached the runner")
	}
}

// TestLongRunOutlivesBodyTimeout: the body deadline is lifted once the body
// is read; a run longer than it is not cancelled by it.
func TestLongRunOutlivesBodyTimeout(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return okResult("slow\n"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	ts := start(t, server.Options{Runner: server.Direct(f), BodyTimeout: 50 * time.Millisecond})
	for _, path := range []string{"/run", "/raw"} {
		resp, body := post(t, ts.URL+path, `{"executable":"x"}`)
		if resp.StatusCode != 200 || bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s: status %d: %s", path, resp.StatusCode, body)
		}
	}
}

func TestHealthz(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	var healthErr error
	ts := start(t, server.Options{Health: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return healthErr
	}, HealthTTL: time.Hour, Tokens: mustTokens(t, "a:0123456789abcdef")})
	for range 5 {
		resp, body := get(t, ts.URL+"/healthz") // no token needed
		var h api.Health
		json.Unmarshal(body, &h)
		if resp.StatusCode != 200 || h != (api.Health{Status: "ok", Jail: "ok"}) {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	if calls != 1 {
		t.Errorf("health check ran %d times within its TTL, want 1", calls)
	}

	ts2 := start(t, server.Options{Health: func(ctx context.Context) error { return errors.New("no user namespaces") }})
	resp, body := get(t, ts2.URL+"/healthz")
	if resp.StatusCode != 503 || !bytes.Contains(body, []byte("no user namespaces")) {
		t.Errorf("failing health: status %d: %s", resp.StatusCode, body)
	}
}

// TestHealthzAnswersDuringACheck: once the health check has an answer,
// /healthz and /readyz give it at once while an expired one is checked
// again, even if that check never ends: a fleet's peers read /readyz with
// a short timeout.
func TestHealthzAnswersDuringACheck(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	ts := start(t, server.Options{Health: func(ctx context.Context) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n > 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("the host broke")
		}
		return nil
	}, HealthTTL: time.Nanosecond})
	defer close(release)
	for _, path := range []string{"/healthz", "/readyz", "/healthz", "/readyz"} {
		if resp, body := get(t, ts.URL+path); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	eventually(t, "a second check to start", func() bool { return count() >= 2 })
	if n := count(); n != 2 {
		t.Errorf("the check ran %d times, want the first and one still running", n)
	}
	release <- struct{}{}
	eventually(t, "the check's new answer", func() bool {
		resp, _ := get(t, ts.URL+"/healthz")
		return resp.StatusCode == 503
	})
}

func TestOpenAPI(t *testing.T) {
	ts := start(t, server.Options{Tokens: mustTokens(t, "a:0123456789abcdef")})
	resp, doc := get(t, ts.URL+"/openapi.yaml")
	if resp.StatusCode != 200 || !bytes.HasPrefix(doc, []byte("openapi: 3.1")) {
		t.Fatalf("status %d: %.80s", resp.StatusCode, doc)
	}
	// Every wire field is documented (the document is hand-written).
	for _, v := range []any{api.Request{}, api.Response{}, api.Verdict{}, api.Event{}, api.ErrorResponse{}, api.Health{},
		api.SessionRequest{}, api.SessionLimits{}, api.SessionPatch{}, api.Session{}, api.SessionEgress{}, api.SessionList{},
		api.JobAccepted{}, api.Job{}, api.JobList{}, api.FileList{}, api.FileInfo{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !bytes.Contains(doc, []byte("\n"+strings.Repeat(" ", 8)+name+":")) &&
				!bytes.Contains(doc, []byte("\n"+strings.Repeat(" ", 12)+name+":")) {
				t.Errorf("openapi.yaml does not document %s.%s", rt.Name(), name)
			}
		}
	}
	for _, code := range []string{api.CodeInvalid, api.CodeBadJSON, api.CodeUnauthorized, api.CodeTooLarge,
		api.CodeUnsupportedMedia, api.CodeBodyTimeout, api.CodeNotFound, api.CodeCommandNotFound, api.CodeNotExecutable, api.CodeLimit, api.CodeBusy,
		api.CodeShuttingDown, api.CodeUnavailable, api.CodeCanceled, api.CodeNotRoot, api.CodeUnsupported, api.CodeRootfs, api.CodeInternal, api.CodeFileNotFound, api.CodeConflict, api.CodeNoSpace, api.CodeSessionLost} {
		if !regexp.MustCompile(`enum: \[[^]]*\b` + code + `\b`).Match(doc) {
			t.Errorf("openapi.yaml does not list error code %s", code)
		}
	}
}

func TestMCPHook(t *testing.T) {
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "mcp caller=%s", server.CallerFromContext(r.Context()))
	})
	ts := start(t, server.Options{MCP: mcp, Tokens: mustTokens(t, "agent:0123456789abcdef")})
	if resp, _ := get(t, ts.URL+"/mcp"); resp.StatusCode != 401 {
		t.Errorf("/mcp without a token: status %d", resp.StatusCode)
	}
	resp, body := get(t, ts.URL+"/mcp", "Authorization", "Bearer 0123456789abcdef")
	if resp.StatusCode != 200 || string(body) != "mcp caller=agent" {
		t.Errorf("/mcp: status %d: %s", resp.StatusCode, body)
	}
	ts2 := start(t, server.Options{})
	if resp, _ := get(t, ts2.URL+"/mcp"); resp.StatusCode != 404 {
		t.Errorf("/mcp without a hook: status %d", resp.StatusCode)
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := server.New(server.Options{}); err == nil {
		t.Error("New without a Runner succeeded")
	}
	if _, err := server.New(server.Options{Runner: server.Direct(&fake{}), BodyTimeout: -1}); err == nil {
		t.Error("New with a negative timeout succeeded")
	}
	if _, err := run.Chain(&fake{}, run.ChainOptions{Max: run.Maxima{Timeout: -1}}); err == nil {
		t.Error("Chain with a negative maximum succeeded")
	}
	if _, err := run.Admit(server.Direct(&fake{}), run.AdmitOptions{MaxQueue: -1}); err == nil {
		t.Error("Admit with a negative queue succeeded")
	}
	srv, err := server.New(server.Options{Runner: server.Direct(&fake{})})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	eventually(t, "the first Serve to answer", func() bool {
		a := tryPost("http://"+ln.Addr().String()+"/run", `{"executable":"x"}`)
		return a.err == nil && a.status == 200
	})
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln2.Close()
	if err := srv.Serve(ctx, ln2); err == nil {
		t.Error("second Serve succeeded")
	}
	cancel()
	server.Recv(t, done, "Serve to return")
}
