package session

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/jaild/jaild/box"
)

// Job is a call running in the background in a sandbox of its own.
type Job struct {
	id      string
	args    []string
	desc    string
	started time.Time
	killed  atomic.Bool // Kill was called
	cancel  context.CancelFunc
	stdout  *stream
	stderr  *stream
	done    chan struct{}
	release func() // Call.ReleaseOutput, or nil

	// Set before done is closed.
	res     *box.Result
	err     error
	endedAt time.Time
}

func (j *Job) isEnded() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// Offsets are where a reader of a job's output is in each stream: it gets
// the bytes from there on, and the offsets to ask for next time.
type Offsets struct{ Stdout, Stderr int64 }

// JobStatus describes a job and the output it produced from some offsets.
type JobStatus struct {
	ID          string
	Command     []string
	Description string // the Call's
	Running     bool
	Started     time.Time
	Ended       time.Time // zero while running
	// Result is the verdict once the job has ended: exit code, signal,
	// timed out, cancelled (killed), OOM, pids limit, usage. Its Stdout
	// and Stderr are empty: the output is in the fields below.
	Result *box.Result
	// Err is why the job could not run or was cut short, if it was.
	Err error
	// Stdout and Stderr are the output from the requested offsets on:
	// what is kept of it (a marker stands for bytes no longer kept).
	Stdout, Stderr string
	// Next are the offsets to ask for to get only newer output.
	Next Offsets
}

// Start runs call in the background in a fresh sandbox on the workspace and
// returns the job's id at once. The call's timeout may not exceed
// Config.MaxJobTimeout, which is also its default. A shell job's directory
// and exports do not carry over (like `cmd &` in a shell). ctx bounds only
// the start: the job runs until it ends, is killed, or the session is
// removed.
func (s *Session) Start(ctx context.Context, call *Call) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := call.validate(); err != nil {
		return "", err
	}
	c := *call // the timeout is filled in on a copy
	call = &c
	max := s.m.cfg.MaxJobTimeout
	switch {
	case call.Timeout == 0:
		call.Timeout = max
	case call.Timeout < 0 || call.Timeout > max:
		return "", invalid("timeout_ms", "%v: a background job's must be between 0 and %v", call.Timeout, max)
	}
	spec, _ := s.spec(call)
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if err := s.check(ctx, call, spec); err != nil {
		return "", err
	}
	maxOut := spec.MaxOutput
	if maxOut == 0 {
		maxOut = box.DefaultMaxOutput
	}
	j := &Job{
		id: uuid.NewString(), args: spec.Args, desc: call.Description, started: time.Now(),
		stdout: newStream(maxOut), stderr: newStream(maxOut), done: make(chan struct{}),
		release: call.ReleaseOutput,
	}
	spec.Stdout = tee(j.stdout, call.Stdout)
	spec.Stderr = tee(j.stderr, call.Stderr)
	if err := s.addJob(j); err != nil {
		return "", err
	}
	if err := s.begin(); err != nil {
		s.mu.Lock()
		j.release = nil // the caller's again: no job kept its output
		s.forgetJob(j.id)
		s.mu.Unlock()
		return "", err
	}
	var jctx context.Context
	jctx, j.cancel = s.bind(context.Background())
	go func() {
		defer s.end()
		defer j.cancel()
		res, err := s.ws.Run(jctx, spec)
		if res != nil {
			// The output is served from the streams, which hold the
			// same bytes with offsets.
			res.Stdout, res.Stderr = "", ""
		}
		switch {
		case err != nil && s.ctx.Err() != nil:
			err = fmt.Errorf("%w: session %s was removed", ErrClosed, s.id)
		case err != nil && s.lost():
			err = fmt.Errorf("%w: session %s was lost: %w", ErrNotFound, s.id, err)
		case err != nil && j.killed.Load():
			err = ErrKilled
		}
		j.res, j.err, j.endedAt = res, err, time.Now()
		close(j.done)
	}()
	return j.id, nil
}

// addJob records j, forgetting the oldest ended job if the session is at
// Config.MaxJobs.
func (s *Session) addJob(j *Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.jobs) >= s.m.cfg.MaxJobs {
		for _, id := range s.jobOrder {
			if s.jobs[id].isEnded() {
				s.forgetJob(id)
				break
			}
		}
	}
	if len(s.jobs) >= s.m.cfg.MaxJobs {
		return &LimitError{What: "jobs per session", Max: s.m.cfg.MaxJobs}
	}
	s.jobs[j.id] = j
	s.jobOrder = append(s.jobOrder, j.id)
	return nil
}

// forgetJob drops a job and gives back its output memory; s.mu is held.
func (s *Session) forgetJob(id string) {
	if j := s.jobs[id]; j != nil && j.release != nil {
		j.release()
	}
	delete(s.jobs, id)
	for i, x := range s.jobOrder {
		if x == id {
			s.jobOrder = append(s.jobOrder[:i], s.jobOrder[i+1:]...)
			break
		}
	}
}

func (s *Session) job(id string) (*Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return nil, fmt.Errorf("%w: job %q", ErrNotFound, id)
	}
	return j, nil
}

// Job returns the status of job id and its output from off on.
func (s *Session) Job(id string, off Offsets) (*JobStatus, error) {
	j, err := s.job(id)
	if err != nil {
		return nil, err
	}
	return j.status(off, true), nil
}

// Jobs lists the session's jobs, oldest first, without their output.
func (s *Session) Jobs() []*JobStatus {
	s.mu.Lock()
	jobs := make([]*Job, 0, len(s.jobs))
	for _, id := range s.jobOrder {
		jobs = append(jobs, s.jobs[id])
	}
	s.mu.Unlock()
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].started.Before(jobs[b].started) })
	out := make([]*JobStatus, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.status(Offsets{}, false))
	}
	return out
}

// Wait blocks until job id ends or ctx ends, whichever is first, and
// returns ctx's error in the second case.
func (s *Session) Wait(ctx context.Context, id string) error {
	j, err := s.job(id)
	if err != nil {
		return err
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitOutput waits until job id has output past off in either stream or
// has ended, or ctx is done (then its error).
func (s *Session) WaitOutput(ctx context.Context, id string, off Offsets) error {
	j, err := s.job(id)
	if err != nil {
		return err
	}
	for {
		outPast, outGrew := j.stdout.past(off.Stdout)
		errPast, errGrew := j.stderr.past(off.Stderr)
		if outPast || errPast {
			return nil
		}
		select {
		case <-j.done:
			return nil
		case <-outGrew:
		case <-errGrew:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Kill kills job id; its result then says Canceled. Killing an ended job
// does nothing.
func (s *Session) Kill(id string) error {
	j, err := s.job(id)
	if err != nil {
		return err
	}
	j.killed.Store(true)
	j.cancel()
	return nil
}

func (j *Job) status(off Offsets, output bool) *JobStatus {
	st := &JobStatus{ID: j.id, Command: j.args, Description: j.desc, Started: j.started, Running: true}
	if j.isEnded() {
		st.Running, st.Result, st.Err, st.Ended = false, j.res, j.err, j.endedAt
	}
	if output {
		st.Stdout, st.Next.Stdout = j.stdout.read(off.Stdout)
		st.Stderr, st.Next.Stderr = j.stderr.read(off.Stderr)
	} else {
		st.Next = Offsets{j.stdout.size(), j.stderr.size()}
	}
	return st
}

func tee(s *stream, w io.Writer) io.Writer {
	if w == nil {
		return s
	}
	return io.MultiWriter(s, w)
}

// stream keeps the first and the last bytes of a job's output, max in all,
// as it is written, and can be read from any offset while it grows. Bytes
// between the head and the tail are counted, not kept; a reader whose
// offset falls among them gets box.Elide's marker in their place.
type stream struct {
	mu      sync.Mutex
	headMax int
	tailMax int
	head    []byte
	tail    []byte // the bytes [total-len(tail), total), at most 2*tailMax
	total   int64
	grew    chan struct{} // closed by the next write; nil while no one waits
}

func newStream(max int64) *stream {
	return &stream{headMax: int(max / 2), tailMax: int(max - max/2)}
}

// past reports whether the stream has bytes at or past offset off, or
// else returns a channel closed by the next write.
func (b *stream) past(off int64) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total > off {
		return true, nil
	}
	if b.grew == nil {
		b.grew = make(chan struct{})
	}
	return false, b.grew
}

// Write implements io.Writer; it never fails.
func (b *stream) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	b.total += int64(n)
	if b.grew != nil {
		close(b.grew)
		b.grew = nil
	}
	if k := min(b.headMax-len(b.head), len(p)); k > 0 {
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*b.tailMax {
		// Compacted only past twice the size, so that a stream of
		// small writes costs amortized constant time per byte.
		b.tail = append(b.tail[:0:0], b.tail[len(b.tail)-b.tailMax:]...)
	}
	return n, nil
}

func (b *stream) size() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// read returns what is kept from offset off on, and the offset after it.
func (b *stream) read(off int64) (string, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < 0 {
		off = 0
	}
	if off >= b.total {
		return "", b.total
	}
	var out []byte
	if off < int64(len(b.head)) {
		out = append(out, b.head[off:]...)
		off = int64(len(b.head))
	}
	tail := b.tail
	if len(tail) > b.tailMax {
		tail = tail[len(tail)-b.tailMax:]
	}
	tailStart := b.total - int64(len(tail))
	if off < tailStart {
		out = append(out, box.Elide(tailStart-off)...)
		off = tailStart
	}
	out = append(out, tail[off-tailStart:]...)
	return string(out), b.total
}
