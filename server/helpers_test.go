package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// patience bounds every wait of these tests for something that must
// happen; it only fails a test that would otherwise hang, it never measures.
const patience = server.TestPatience

// httpc bounds every request of the tests, so that a server that never
// answers fails a test instead of hanging it.
var httpc = &http.Client{Timeout: 2 * patience}

// fake and gate are the package's doubles of the jail (fakes_test.go).
type (
	fake = server.FakeBase
	gate = server.Gate
)

func newGate() *gate { return server.NewGate() }

func okResult(stdout string) *box.Result {
	return &box.Result{ID: "sb-1", Stdout: stdout, StdoutBytes: int64(len(stdout)), Duration: 3 * time.Millisecond}
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testServer is a Server serving on a loopback port for one test.
type testServer struct {
	*server.Server
	URL     string
	Addr    string
	stop    context.CancelFunc
	done    chan error
	Metrics *run.Metrics
}

// start serves opts on 127.0.0.1, and stops the server at the end of the
// test. opts.Runner defaults to a fake.
func start(t *testing.T, opts server.Options) *testServer {
	t.Helper()
	if opts.Runner == nil {
		opts.Runner = server.Direct(&fake{})
	}
	if opts.Metrics == nil {
		opts.Metrics = run.NewMetrics()
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: srv, URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(),
		stop: cancel, done: make(chan error, 1), Metrics: opts.Metrics}
	go func() { ts.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(patience):
			t.Errorf("Serve did not return after its ctx was cancelled")
		}
	})
	return ts
}

// shutdown cancels Serve's ctx and returns its error.
func (ts *testServer) shutdown(t *testing.T) error {
	t.Helper()
	ts.stop()
	err := server.Recv(t, ts.done, "Serve to return")
	ts.done <- err // for the cleanup
	return err
}

// post sends body with Content-Type application/json (unless the header
// is overridden) and returns the answer with its body read.
func post(t *testing.T, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	a := tryPost(url, body, hdr...)
	if a.err != nil {
		t.Fatalf("POST %s: %v", url, a.err)
	}
	return a.resp, a.body
}

type answer struct {
	resp   *http.Response
	status int
	body   []byte
	err    error
}

func tryPost(url, body string, hdr ...string) answer {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return answer{resp: resp, status: resp.StatusCode, body: data, err: err}
}

// postAsync posts from a goroutine of its own; the answer arrives on the
// channel. The goroutine is joined at the end of the test.
func postAsync(t *testing.T, url, body string) <-chan answer {
	t.Helper()
	c := make(chan answer, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c <- tryPost(url, body)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(patience):
			t.Errorf("a request of the test did not end")
		}
	})
	return c
}

func get(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func decodeError(t *testing.T, data []byte) api.ErrorResponse {
	t.Helper()
	var e api.ErrorResponse
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("error body %q: %v", data, err)
	}
	return e
}

// events splits an NDJSON body into events, strictly.
func events(t *testing.T, data []byte) []api.Event {
	t.Helper()
	var evs []api.Event
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	for {
		var ev api.Event
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return evs
		} else if err != nil {
			t.Fatalf("decode event stream %q: %v", data, err)
		}
		evs = append(evs, ev)
	}
}

// metric returns the value of one sample line of /metrics, e.g.
// `jaild_runs_total{verdict="ok"}`, or -1 if absent.
func metric(t *testing.T, ts *testServer, sample string, hdr ...string) float64 {
	t.Helper()
	_, body := get(t, ts.URL+"/metrics", hdr...)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines to write
// while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}
