package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

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
	// MaxOutputMemory bounds the memory that the output of all admitted
	// runs may take: each run holds twice its MaxOutput (stdout and
	// stderr) from admission until its result is written, and waits in
	// the queue while that much is not free. Zero means
	// DefaultMaxOutputMemory.
	MaxOutputMemory int64
	// Metrics, if non-nil, gets the queue depth and the refusals.
	Metrics *Metrics
	// BaseUp, if not nil, says when the jail below can take runs: it
	// returns a channel closed while it can, and while it cannot (the
	// daemon's worker being restarted) one closed when it can again. Its
	// runs then fail with box.ErrUnavailable having run nothing: an
	// admitted run waits for the jail instead, as it waits for a slot,
	// until MaxWait after it arrived. Nil, or no queue (MaxQueue zero):
	// such runs fail.
	BaseUp func() <-chan struct{}
}

// Defaults for AdmitOptions.
const (
	DefaultMaxConcurrent   = 8
	DefaultQueueWait       = 10 * time.Second
	DefaultMaxOutputMemory = 64 << 20
)

// Admitter is a Runner decorator that admits at most MaxConcurrent runs into
// the next Runner at once, within MaxOutputMemory, queues up to MaxQueue more
// for at most MaxWait each, and refuses the rest with [box.ErrBusy]. Its memory
// and goroutines are bounded by MaxConcurrent+MaxQueue callers: a refused run
// costs nothing.
type Admitter struct {
	next    Runner
	slots   chan struct{} // a token per running run
	output  *outputBudget
	maxQ    int64
	maxWait time.Duration
	queued  atomic.Int64
	metrics *Metrics
	baseUp  func() <-chan struct{}
	// avgRun is a moving average of the runs' time in the jail, in
	// nanoseconds, for the Retry-After estimate.
	avgRun atomic.Int64
}

// Admit wraps r with admission control.
func Admit(r Runner, o AdmitOptions) (*Admitter, error) {
	if o.MaxConcurrent < 0 || o.MaxQueue < 0 || o.MaxWait < 0 || o.MaxOutputMemory < 0 {
		return nil, fmt.Errorf("run: negative admission option in %+v", o)
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultQueueWait
	}
	if o.MaxOutputMemory == 0 {
		o.MaxOutputMemory = DefaultMaxOutputMemory
	}
	a := &Admitter{
		next:    r,
		slots:   make(chan struct{}, o.MaxConcurrent),
		output:  newOutputBudget(o.MaxOutputMemory),
		maxQ:    int64(o.MaxQueue),
		maxWait: o.MaxWait,
		metrics: o.Metrics,
	}
	if o.MaxQueue > 0 {
		a.baseUp = o.BaseUp
	}
	o.Metrics.observeAdmitter(a)
	return a, nil
}

// Running is the number of admitted runs.
func (a *Admitter) Running() int { return len(a.slots) }

// Queued is the number of runs waiting for a slot.
func (a *Admitter) Queued() int { return int(a.queued.Load()) }

// OutputMemory is the output memory held by admitted runs and its bound.
func (a *Admitter) OutputMemory() (held, max int64) { return a.output.held.Load(), a.output.size }

// Run implements Runner. The run's output memory is let go once the
// result is written when the front end keeps it (Request.KeepOutput), else
// when the run ends.
func (a *Admitter) Run(ctx context.Context, req Request) (*box.Result, error) {
	return admit(ctx, a, req, false, a.next.Run)
}

// Start implements Runner. A background job keeps its output in the front
// end as it runs and after: the job takes the start's output memory over
// (startInSession) and lets it go when the job is forgotten, so that jobs
// and runs share the one bound. A start that fails lets it go here.
func (a *Admitter) Start(ctx context.Context, req Request) (string, error) {
	return admit(ctx, a, req, true, a.next.Start)
}

// admit admits req (a background start if background) and passes it to
// next once it has a slot, its output memory and the jail is up.
func admit[T any](ctx context.Context, a *Admitter, req Request, background bool, next func(context.Context, Request) (T, error)) (T, error) {
	var zero T
	spec := req.Spec
	t0 := time.Now()
	mem := outputMemory(spec)
	if mem > a.output.size {
		return zero, &box.InvalidError{Field: "max_output_bytes", Reason: fmt.Sprintf(
			"%d per stream needs %d bytes, more than the daemon's output memory of %d", spec.MaxOutput, mem, a.output.size)}
	}
	if err := a.acquire(ctx, mem); err != nil {
		return zero, err
	}
	release := func() { a.output.release(mem) }
	switch {
	case background:
		out := &jobOutput{release: sync.OnceFunc(release)}
		req.jobOutput = out
		defer func() {
			if rel := out.take(); rel != nil {
				rel()
			}
		}()
	case req.KeepOutput != nil:
		req.KeepOutput.keep(release)
	default:
		defer release()
	}
	defer func() { <-a.slots }()
	deadline := t0.Add(a.maxWait)
	if err := a.awaitBase(ctx, deadline, 0); err != nil {
		return zero, err
	}
	a.metrics.waited(time.Since(t0))
	if req.OnAdmit != nil {
		req.OnAdmit()
	}
	for {
		t1 := time.Now()
		v, err := next(ctx, req)
		if a.baseUp == nil || !errors.Is(err, box.ErrUnavailable) {
			a.observeRun(time.Since(t1))
			return v, err
		}
		// The jail went down between the check and the run (a worker
		// that died): nothing ran, so the run may wait and go again.
		// A run the worker held fails with worker.ErrLost instead,
		// never retried: its command may have run.
		if err := a.awaitBase(ctx, deadline, retryPause); err != nil {
			return zero, err
		}
	}
}

// retryPause is the least time between two tries of a run whose jail was
// down: one that comes up and dies at once must not make the retry a busy
// loop.
const retryPause = 50 * time.Millisecond

// awaitBase waits, after pause, until the jail below can take runs (see
// AdmitOptions.BaseUp), or until deadline, when the run is refused as one
// that found no slot in time is.
func (a *Admitter) awaitBase(ctx context.Context, deadline time.Time, pause time.Duration) error {
	if a.baseUp == nil {
		return nil
	}
	if pause == 0 {
		select {
		case <-a.baseUp():
			return nil
		default:
		}
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if pause > 0 {
		select {
		case <-time.After(pause):
		case <-wctx.Done():
			return a.waitFailed(ctx)
		}
	}
	select {
	case <-a.baseUp():
		return nil
	case <-wctx.Done():
		return a.waitFailed(ctx)
	}
}

// outputMemory is what spec's output may take: two streams of MaxOutput.
func outputMemory(spec *jail.Spec) int64 {
	n := spec.MaxOutput
	if n == 0 {
		n = box.DefaultMaxOutput
	}
	if n > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * n
}

func (a *Admitter) acquire(ctx context.Context, mem int64) error {
	if a.output.sem.TryAcquire(mem) {
		select {
		case a.slots <- struct{}{}:
			a.output.note(mem)
			return nil
		default:
			a.output.sem.Release(mem)
		}
	}
	// All slots or the output memory taken: queue, if the queue has room.
	// The counter is raised before the check so that concurrent callers
	// cannot both take the last queue place.
	if a.queued.Add(1) > a.maxQ {
		a.queued.Add(-1)
		return a.busy()
	}
	defer a.queued.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, a.maxWait)
	defer cancel()
	if err := a.output.acquire(wctx, mem); err != nil {
		return a.waitFailed(ctx)
	}
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-wctx.Done():
		a.output.release(mem)
		return a.waitFailed(ctx)
	}
}

// waitFailed is the error of a wait in the queue that ended without a slot:
// the caller gave up, or the wait expired.
func (a *Admitter) waitFailed(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		a.metrics.abandoned()
		return err
	}
	return a.busy()
}

func (a *Admitter) busy() error {
	a.metrics.Rejected(RejectBusy)
	return &box.BusyError{RetryAfter: a.retryAfter()}
}

// retryAfter estimates when a run refused now could be admitted: the queue
// ahead of it, plus itself, run through the slots at the recent pace.
func (a *Admitter) retryAfter() time.Duration {
	avg := time.Duration(a.avgRun.Load())
	d := avg * time.Duration(a.queued.Load()+1) / time.Duration(cap(a.slots))
	return min(max(d, time.Second), a.maxWait+time.Minute)
}

// observeRun folds d into the moving average of run times (weight 1/8).
func (a *Admitter) observeRun(d time.Duration) {
	for {
		old := a.avgRun.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if a.avgRun.CompareAndSwap(old, next) {
			return
		}
	}
}

// outputBudget is the output memory that admitted runs may hold. When the
// last holder of a large share lets go, it hands the freed memory back to
// the operating system: Go's scavenger would return it only gradually,
// leaving a daemon that once served a big output large for minutes.
type outputBudget struct {
	sem  *semaphore.Weighted
	size int64
	held atomic.Int64
	peak atomic.Int64 // most held since the memory was last given back
}

// freeThreshold is the peak of held output memory above which the daemon
// gives memory back to the system once nothing is held any more.
const freeThreshold = 8 << 20

func newOutputBudget(size int64) *outputBudget {
	return &outputBudget{sem: semaphore.NewWeighted(size), size: size}
}

func (b *outputBudget) acquire(ctx context.Context, n int64) error {
	if err := b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	b.note(n)
	return nil
}

func (b *outputBudget) note(n int64) {
	h := b.held.Add(n)
	for p := b.peak.Load(); h > p && !b.peak.CompareAndSwap(p, h); p = b.peak.Load() {
	}
}

func (b *outputBudget) release(n int64) {
	b.sem.Release(n)
	if b.held.Add(-n) == 0 && b.peak.Load() > freeThreshold {
		b.peak.Store(0)
		go debug.FreeOSMemory()
	}
}
