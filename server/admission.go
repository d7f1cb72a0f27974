package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/jail"
)

// ErrBusy is returned by an [Admitter] when a run can neither start nor
// wait: the queue is full, or the run waited its maximum in the queue.
// Front ends answer it with "try again later" (HTTP 429 with Retry-After).
var ErrBusy = errors.New("server: too many sandboxes running, try again later")

// AdmitOptions bound the sandboxes of one daemon.
type AdmitOptions struct {
	// MaxConcurrent is how many runs may be in the jail at once. Zero
	// means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxQueue is how many runs may wait for a slot; beyond it a run is
	// refused at once. Zero means no queue: refuse whenever all slots are
	// taken.
	MaxQueue int
	// MaxWait is how long a queued run waits for a slot before it is
	// refused. Zero means DefaultQueueWait.
	MaxWait time.Duration
	// Metrics, if non-nil, gets the queue depth and the refusals.
	Metrics *Metrics
}

// Defaults for AdmitOptions.
const (
	DefaultMaxConcurrent = 8
	DefaultQueueWait     = 10 * time.Second
)

// Admitter is a Runner decorator that admits at most MaxConcurrent runs into
// the next Runner at once, queues up to MaxQueue more for at most MaxWait
// each, and refuses the rest with [ErrBusy]. Its memory and goroutines are
// bounded by MaxConcurrent+MaxQueue callers: a refused run costs nothing.
type Admitter struct {
	next    Runner
	slots   chan struct{} // a token per running run
	maxQ    int64
	maxWait time.Duration
	queued  atomic.Int64
	metrics *Metrics
}

// Admit wraps r with admission control.
func Admit(r Runner, o AdmitOptions) (*Admitter, error) {
	if o.MaxConcurrent < 0 || o.MaxQueue < 0 || o.MaxWait < 0 {
		return nil, fmt.Errorf("server: negative admission option in %+v", o)
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultQueueWait
	}
	a := &Admitter{
		next:    r,
		slots:   make(chan struct{}, o.MaxConcurrent),
		maxQ:    int64(o.MaxQueue),
		maxWait: o.MaxWait,
		metrics: o.Metrics,
	}
	o.Metrics.observeAdmitter(a)
	return a, nil
}

// Running is the number of admitted runs.
func (a *Admitter) Running() int { return len(a.slots) }

// Queued is the number of runs waiting for a slot.
func (a *Admitter) Queued() int { return int(a.queued.Load()) }

// Run implements Runner.
func (a *Admitter) Run(ctx context.Context, spec *jail.Spec) (*jail.Result, error) {
	t0 := time.Now()
	if err := a.acquire(ctx); err != nil {
		return nil, err
	}
	defer func() { <-a.slots }()
	a.metrics.waited(time.Since(t0))
	started(ctx)
	return a.next.Run(ctx, spec)
}

func (a *Admitter) acquire(ctx context.Context) error {
	select {
	case a.slots <- struct{}{}:
		return nil
	default:
	}
	// All slots taken: queue, if the queue has room. The counter is
	// raised before the check so that concurrent callers cannot both
	// take the last queue place.
	if a.queued.Add(1) > a.maxQ {
		a.queued.Add(-1)
		a.metrics.rejected(rejectBusy)
		return ErrBusy
	}
	defer a.queued.Add(-1)
	t := time.NewTimer(a.maxWait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-t.C:
		a.metrics.rejected(rejectBusy)
		return ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startedKey carries functions to call once a run is admitted: /raw uses it
// to answer "busy" with a 429 status and yet tell its client promptly when
// the command starts; the audit log uses it to measure the queueing time.
type startedKey struct{}

// withStarted adds f to the functions started(ctx) calls, after any that
// ctx already carries.
func withStarted(ctx context.Context, f func()) context.Context {
	if prev, ok := ctx.Value(startedKey{}).(func()); ok {
		g := f
		f = func() { prev(); g() }
	}
	return context.WithValue(ctx, startedKey{}, f)
}

func started(ctx context.Context) {
	if f, ok := ctx.Value(startedKey{}).(func()); ok {
		f()
	}
}
