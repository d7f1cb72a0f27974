package run_test

import (
	"context"
	"errors"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"net"
	"testing"
	"time"

	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// blockingJail makes workspaces whose runs last until they are cancelled:
// background jobs that keep running.
type blockingJail struct{ dir string }

func (j blockingJail) NewWorkspace(context.Context, int64, bool, *box.Limits) (session.Workspace, error) {
	return blockingWorkspace{j.dir}, nil
}

type blockingWorkspace struct{ dir string }

func (w blockingWorkspace) Dir() string                   { return w.dir }
func (blockingWorkspace) HostIDs() (int, int)             { return 0, 0 }
func (blockingWorkspace) Size() int64                     { return 1 << 20 }
func (blockingWorkspace) Used() (int64, error)            { return 0, nil }
func (blockingWorkspace) Close() error                    { return nil }
func (blockingWorkspace) Lost() <-chan struct{}           { return nil }
func (blockingWorkspace) TakeProxyListener() net.Listener { return nil }
func (blockingWorkspace) Run(ctx context.Context, _ *jail.Spec) (*box.Result, error) {
	<-ctx.Done()
	return &box.Result{Canceled: true}, ctx.Err()
}

// TestJobOutputMemory: a background job holds its output memory (twice
// its maximum output) from the daemon's --max-output-memory while its
// output is kept, as a run does until its answer is written: once jobs
// hold it all, runs and further jobs are refused as busy; removing the
// session gives it back.
func TestJobOutputMemory(t *testing.T) {
	m, err := session.New(blockingJail{t.TempDir()}, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	base := baseFunc(func(context.Context, *jail.Spec) (*box.Result, error) { return &box.Result{}, nil })
	r, err := run.Chain(base, run.ChainOptions{
		Sessions:  m,
		Admission: run.AdmitOptions{MaxConcurrent: 8, MaxOutputMemory: 4 << 20, MaxWait: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Create(context.Background(), session.Options{Owner: caller.FromToken("a")})
	if err != nil {
		t.Fatal(err)
	}
	req := run.Request{Caller: "a", Owner: caller.FromToken("a"), SessionID: s.ID(),
		Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 1 << 20}}}
	for i := range 2 {
		if id, err := r.Start(context.Background(), req); err != nil || id == "" {
			t.Fatalf("job %d: %q %v", i, id, err)
		}
	}
	for _, background := range []bool{true, false} {
		// The fake's calls last until cancelled: one admitted would
		// end with the context's error.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		if background {
			_, err = r.Start(ctx, req)
		} else {
			_, err = r.Run(ctx, req)
		}
		cancel()
		if !errors.Is(err, box.ErrBusy) {
			t.Errorf("background=%v with the output memory held by jobs: %v, want busy", background, err)
		}
	}
	if err := m.Delete(caller.FromToken("a"), s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background(), run.Request{Caller: "a",
		Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 1 << 20}}}); err != nil {
		t.Errorf("a run after the session's removal: %v", err)
	}
}
