package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// Test doubles of the jail, shared by both test packages of server: this
// one (the MCP tests) and server_test (the HTTP tests), which sees them by
// their exported names. They exist only in test builds.

// Direct returns a Runner that runs requests straight on base, outside any
// chain: no maxima, admission, audit or metrics. Requests that name a
// session, and background starts, are refused, as by a daemon that serves
// no sessions.
func Direct(base run.Base) run.Runner { return direct{base} }

type direct struct{ base run.Base }

func (d direct) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	if req.SessionID != "" {
		return nil, ErrNoSessions
	}
	return d.base.Run(ctx, req.Spec)
}

func (direct) Start(context.Context, run.Request) (string, error) { return "", ErrNoSessions }

// ErrNoSessions is the refusal of a request in a session, or of a
// background start, by a daemon that serves no sessions: the test
// runners' answer to what they do not serve.
var ErrNoSessions = &box.InvalidError{Field: "session_id", Reason: "sessions are not served by this daemon"}

// TokenCount is the number of tokens t holds.
func TokenCount(t *Tokens) int { return len(t.names) }

// TestPatience bounds every wait of the tests for something that must
// happen; it only fails a test that would otherwise hang, it never measures.
const TestPatience = 20 * time.Second

// FakeBase is a run.Base that records the specs it is given and runs Fn,
// by default answering with the command echoed back ("ARGS...\n"). Like the
// jail, it refuses an invalid spec before anything runs.
type FakeBase struct {
	Fn    func(ctx context.Context, s *jail.Spec) (*box.Result, error)
	mu    sync.Mutex
	specs []jail.Spec
}

func (f *FakeBase) Run(ctx context.Context, s *jail.Spec) (*box.Result, error) {
	f.mu.Lock()
	f.specs = append(f.specs, *s)
	f.mu.Unlock()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	// A jail with the default working directory.
	if err := box.CheckDir(s.Dir, ""); err != nil {
		return nil, err
	}
	if f.Fn != nil {
		return f.Fn(ctx, s)
	}
	out := strings.Join(s.Args, " ") + "\n"
	return &box.Result{ID: "fake", Stdout: out, StdoutBytes: int64(len(out)), Duration: 3 * time.Millisecond}, nil
}

// Calls returns the specs Run was given.
func (f *FakeBase) Calls() []jail.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}

// Gate is a run.Base whose runs block until Open or until their ctx ends.
// On Open a run answers with its command echoed back; on its ctx's end, as
// a killed sandbox with ctx's error.
type Gate struct {
	Entered chan struct{} // a value per run that started
	Ended   chan error    // the ctx error (or nil) of every run that ended
	release chan struct{}
	once    sync.Once
}

// NewGate returns a closed Gate.
func NewGate() *Gate {
	return &Gate{Entered: make(chan struct{}, 100), Ended: make(chan error, 100), release: make(chan struct{})}
}

func (g *Gate) Run(ctx context.Context, s *jail.Spec) (*box.Result, error) {
	g.Entered <- struct{}{}
	select {
	case <-g.release:
		g.Ended <- nil
		return &box.Result{ID: "sb-1", Stdout: strings.Join(s.Args, " "), Duration: time.Millisecond}, nil
	case <-ctx.Done():
		g.Ended <- ctx.Err()
		return &box.Result{ID: "sb-killed", ExitCode: -1, Signal: "SIGKILL", Canceled: true}, ctx.Err()
	}
}

// Open lets every run, present and future, finish.
func (g *Gate) Open() { g.once.Do(func() { close(g.release) }) }

// Recv waits for a value on c, failing t after TestPatience.
func Recv[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(TestPatience):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
