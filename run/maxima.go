package run

import (
	"context"
	"fmt"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

// Maxima are the operator's upper bounds on what a request may ask for. A
// request's unset limits get the jail's defaults, lowered to the maxima
// where those are lower; a request's explicit limits above a maximum are
// refused, never silently lowered, so that a caller learns what it got.
type Maxima struct {
	// Limits holds the largest memory, pids, cpus and tmpfs size a
	// sandbox may get. A zero field means no maximum beyond the jail's.
	Limits box.Limits
	// Timeout is the longest run; zero means box.MaxTimeout.
	Timeout time.Duration
	// MaxOutput is the most output kept per stream; zero means no
	// maximum.
	MaxOutput int64
	// DefaultLimits are what a request that leaves a limit unset gets,
	// lowered to Limits; a zero field means the jail's default. (jaild
	// mcp's limit flags are each sandbox's limits: defaults and maxima.)
	DefaultLimits box.Limits
	// ToolTimeout is the default timeout of an agent tool's call
	// (Request.Tool); zero means DefaultToolTimeout. See ToolTimeouts.
	ToolTimeout time.Duration
}

// Validate reports a negative maximum.
func (m Maxima) Validate() error {
	for _, l := range []box.Limits{m.Limits, m.DefaultLimits} {
		if l.Memory < 0 || l.Pids < 0 || l.CPUs < 0 || l.TmpfsSize < 0 {
			return fmt.Errorf("run: negative limit in maxima %+v", l)
		}
	}
	if m.ToolTimeout < 0 {
		return fmt.Errorf("run: negative tool timeout %v", m.ToolTimeout)
	}
	if m.Timeout < 0 || m.Timeout > box.MaxTimeout {
		return fmt.Errorf("run: maximum timeout %v not between 0 and %v", m.Timeout, box.MaxTimeout)
	}
	if m.MaxOutput < 0 {
		return fmt.Errorf("run: negative maximum output %d", m.MaxOutput)
	}
	return nil
}

// Apply fills s's unset limits, timeout and output size with the defaults
// (m.DefaultLimits, or the jail's) capped at m, then refuses anything above m. After a nil error
// every limit of s is explicit and within m, and s is valid.
func (m Maxima) Apply(s *jail.Spec) error {
	l, def := &s.Limits, m.DefaultLimits.WithDefaults()
	l.Memory = orCapped(l.Memory, def.Memory, m.Limits.Memory)
	l.Pids = orCapped(l.Pids, def.Pids, m.Limits.Pids)
	l.TmpfsSize = orCapped(l.TmpfsSize, def.TmpfsSize, m.Limits.TmpfsSize)
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
		if m.Limits.CPUs > 0 && l.CPUs > m.Limits.CPUs {
			l.CPUs = m.Limits.CPUs
		}
	}
	if err := l.Within(m.Limits); err != nil {
		return err
	}
	maxTimeout := m.Timeout
	if maxTimeout == 0 {
		maxTimeout = box.MaxTimeout
	}
	s.Timeout = time.Duration(orCapped(int64(s.Timeout), int64(box.DefaultTimeout), int64(maxTimeout)))
	if s.Timeout > maxTimeout {
		return invalid("timeout_ms", "%v exceeds the maximum of %v", s.Timeout, maxTimeout)
	}
	s.MaxOutput = orCapped(s.MaxOutput, box.DefaultMaxOutput, m.MaxOutput)
	if m.MaxOutput > 0 && s.MaxOutput > m.MaxOutput {
		return invalid("max_output_bytes", "%d exceeds the maximum of %d", s.MaxOutput, m.MaxOutput)
	}
	return s.Validate()
}

// Defaults returns what a request that asks for nothing gets: the default
// limits, timeout and output cap, each lowered to m. The pool's
// sandboxes and the MCP tools use them, so that every front end agrees.
func (m Maxima) Defaults() (box.Limits, time.Duration, int64) {
	s := jail.Spec{Command: box.Command{Args: []string{"true"}}}
	if err := m.Apply(&s); err != nil {
		// Apply only refuses what a request asked for above m, and this
		// one asked for nothing.
		panic("run: defaults refused by valid maxima: " + err.Error())
	}
	return s.Limits, s.Timeout, s.MaxOutput
}

// orCapped returns v, or if v is unset (zero) def lowered to max (if max > 0).
func orCapped(v, def, max int64) int64 {
	if v != 0 {
		return v
	}
	if max > 0 && def > max {
		return max
	}
	return def
}

// enforcer applies max to every spec before passing it on, and refuses
// specs above it with a *box.InvalidError. The rest of the chain sees the
// effective spec, a copy: the caller's request and spec stay as they were.
// It is the first link of the daemon's chain, so no front end can skip the
// operator's maxima.
type enforcer struct {
	next     Runner
	max      Maxima
	audit    *AuditLog // records refusals, which never reach the chain's auditor
	sessions *session.Manager
	workDir  string // the sandboxes' working directory
}

func (e *enforcer) Run(ctx context.Context, req Request) (*box.Result, error) {
	req, err := e.effective(req, false)
	if err != nil {
		return nil, err
	}
	return e.next.Run(ctx, req)
}

func (e *enforcer) Start(ctx context.Context, req Request) (string, error) {
	req, err := e.effective(req, true)
	if err != nil {
		return "", err
	}
	return e.next.Start(ctx, req)
}

// effective returns req with a Spec of its own: the caller's, within the
// maxima, every limit explicit; or audits and returns the refusal.
func (e *enforcer) effective(req Request, background bool) (Request, error) {
	s := *req.Spec
	max := e.max
	err := sessionSpec(e.sessions, req, background, &s, &max)
	if err == nil {
		err = resolveTimeout(req, &s, e.max, max, background)
	}
	if err == nil {
		err = max.Apply(&s)
	}
	if err == nil {
		err = box.CheckDir(s.Dir, e.workDir)
	}
	if err != nil {
		e.audit.refused(req, err)
		return req, err
	}
	req.Spec = &s
	return req, nil
}

// checkTimeout refuses a timeout t above max (zero: box.MaxTimeout),
// naming it as the caller did, in the caller's unit.
func checkTimeout(req Request, t, max time.Duration) error {
	if max == 0 {
		max = box.MaxTimeout
	}
	field, n, unit := "timeout_ms", int64(t/time.Millisecond), time.Millisecond
	if req.TimeoutField != "" && req.TimeoutUnit > 0 {
		field, n, unit = req.TimeoutField, req.TimeoutValue, req.TimeoutUnit
	}
	if t <= max && n <= int64(max/unit) {
		return nil
	}
	return invalid(field, "%d exceeds the maximum of %d", n, int64(max/unit))
}

func invalid(field, format string, args ...any) *box.InvalidError {
	return &box.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
