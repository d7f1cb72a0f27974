package run_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// restarting is a jail that is down at times, as the daemon's worker is
// while it restarts: its runs then fail with box.ErrUnavailable, having
// run nothing. fail, if set, answers a run made while it is up.
type restarting struct {
	mu    sync.Mutex
	up    chan struct{}
	calls int
	fail  func(call int) error
}

func newRestarting(up bool) *restarting {
	r := &restarting{up: make(chan struct{})}
	if up {
		close(r.up)
	}
	return r
}

func (r *restarting) Up() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// down makes the jail go down, if it is up.
func (r *restarting) down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.up:
		r.up = make(chan struct{})
	default:
	}
}

// restart brings the jail up.
func (r *restarting) restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.up)
}

func (r *restarting) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	r.mu.Lock()
	r.calls++
	call, up, fail := r.calls, r.up, r.fail
	r.mu.Unlock()
	select {
	case <-up:
	default:
		return nil, fmt.Errorf("%w: restarting", box.ErrUnavailable)
	}
	if fail != nil {
		if err := fail(call); err != nil {
			return nil, err
		}
	}
	return &box.Result{Stdout: "ran"}, nil
}

func (r *restarting) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// TestAdmissionWaitsForJail: runs that find the jail down (its worker
// being restarted) wait for it within their queue deadline and run once it
// is up; one whose deadline passes is refused as busy, as a run that found
// no slot in time is; a run the jail held and lost is never run again.
func TestAdmissionWaitsForJail(t *testing.T) {
	lost := errors.New("the worker died holding the run")
	tests := []struct {
		name string
		opts run.AdmitOptions
		up   bool // the jail is up at the start
		// do runs the test's requests on r while base restarts.
		do func(t *testing.T, r run.Runner, base *restarting)
	}{
		{
			name: "queued runs wait for the restart",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 4, MaxWait: time.Minute},
			do: func(t *testing.T, r run.Runner, base *restarting) {
				errs := make(chan error, 3)
				for range 3 {
					go func() {
						res, err := r.Run(context.Background(), run.Request{Spec: trueSpec()})
						if err == nil && res.Stdout != "ran" {
							err = fmt.Errorf("result %+v", res)
						}
						errs <- err
					}()
				}
				select {
				case err := <-errs:
					t.Fatalf("a run ended while the jail was down: %v", err)
				case <-time.After(200 * time.Millisecond):
				}
				base.restart()
				for range 3 {
					if err := recv(t, errs); err != nil {
						t.Errorf("a queued run: %v", err)
					}
				}
			},
		},
		{
			name: "a run whose queue deadline passes is refused busy",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 4, MaxWait: 100 * time.Millisecond},
			do: func(t *testing.T, r run.Runner, base *restarting) {
				_, err := r.Run(context.Background(), run.Request{Spec: trueSpec()})
				if !errors.Is(err, box.ErrBusy) {
					t.Errorf("err %v, want busy", err)
				}
			},
		},
		{
			name: "the jail goes down between the check and the run",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 4, MaxWait: time.Minute},
			up:   true,
			do: func(t *testing.T, r run.Runner, base *restarting) {
				base.fail = func(call int) error {
					if call == 1 {
						base.down()
						time.AfterFunc(100*time.Millisecond, base.restart)
						return fmt.Errorf("%w: it exited", box.ErrUnavailable)
					}
					return nil
				}
				res, err := r.Run(context.Background(), run.Request{Spec: trueSpec()})
				if err != nil || res.Stdout != "ran" || base.Calls() != 2 {
					t.Errorf("got %+v, %v after %d calls; want a result after 2", res, err, base.Calls())
				}
			},
		},
		{
			name: "a run the jail lost is not run again",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 4, MaxWait: time.Minute},
			up:   true,
			do: func(t *testing.T, r run.Runner, base *restarting) {
				base.fail = func(int) error { base.down(); return lost }
				_, err := r.Run(context.Background(), run.Request{Spec: trueSpec()})
				if !errors.Is(err, lost) || base.Calls() != 1 {
					t.Errorf("got %v after %d calls; want the loss after 1", err, base.Calls())
				}
			},
		},
		{
			name: "the caller gives up while the jail is down",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 4, MaxWait: time.Minute},
			do: func(t *testing.T, r run.Runner, base *restarting) {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_, err := r.Run(ctx, run.Request{Spec: trueSpec()})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err %v, want the caller's", err)
				}
			},
		},
		{
			name: "without a queue a run does not wait",
			opts: run.AdmitOptions{MaxConcurrent: 1, MaxWait: time.Minute},
			do: func(t *testing.T, r run.Runner, base *restarting) {
				_, err := r.Run(context.Background(), run.Request{Spec: trueSpec()})
				if !errors.Is(err, box.ErrUnavailable) {
					t.Errorf("err %v, want unavailable", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := newRestarting(tt.up)
			t.Cleanup(func() {
				select {
				case <-base.Up():
				default:
					base.restart()
				}
			})
			r, err := run.Chain(base, run.ChainOptions{Admission: tt.opts})
			if err != nil {
				t.Fatal(err)
			}
			tt.do(t, r, base)
		})
	}
}

func trueSpec() *jail.Spec { return &jail.Spec{Command: box.Command{Args: []string{"true"}}} }

// recv receives from c, or fails t after a while.
func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
	var zero T
	return zero
}

// TestOutputHold: a run given an OutputHold keeps its output memory (twice
// its MaxOutput) after Run returns, until the hold's Release; one without
// lets it go when it ends, and so does one whose hold was released before.
func TestOutputHold(t *testing.T) {
	base := baseFunc(func(context.Context, *jail.Spec) (*box.Result, error) { return &box.Result{}, nil })
	a, err := run.Admit(onBase{base}, run.AdmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 1000}}
	held := func() int64 { h, _ := a.OutputMemory(); return h }

	if _, err := a.Run(context.Background(), run.Request{Spec: spec}); err != nil || held() != 0 {
		t.Fatalf("without a hold: %v, %d bytes held after the run", err, held())
	}
	var hold run.OutputHold
	for range 2 {
		if _, err := a.Run(context.Background(), run.Request{Spec: spec, KeepOutput: &hold}); err != nil {
			t.Fatal(err)
		}
	}
	if held() != 4000 {
		t.Errorf("%d bytes held by two runs with a hold, want 4000 until Release", held())
	}
	hold.Release()
	hold.Release()
	if held() != 0 {
		t.Errorf("%d bytes held after Release", held())
	}
	if _, err := a.Run(context.Background(), run.Request{Spec: spec, KeepOutput: &hold}); err != nil || held() != 0 {
		t.Errorf("with a released hold: %v, %d bytes held after the run", err, held())
	}
}

// onBase is a Runner that runs requests on a Base, and starts none.
type onBase struct{ base run.Base }

func (o onBase) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	return o.base.Run(ctx, req.Spec)
}

func (onBase) Start(context.Context, run.Request) (string, error) {
	return "", errors.New("no background jobs here")
}
