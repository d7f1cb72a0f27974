package run

import (
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// The agent tools' timeout convention. A call of an agent tool (the MCP
// bash, execute and run_network_tool tools: Request.Tool) follows the Bash
// tools of coding agents, which models are trained on: a default timeout of
// its own, and a maximum above which a timeout is reduced to it rather than
// refused. The chain applies it, so that the tools' schemas, which state the
// default and the maximum, read them from the same Maxima.
const (
	// DefaultToolTimeout is an agent tool call's default timeout unless
	// Maxima.ToolTimeout says otherwise.
	DefaultToolTimeout = 120 * time.Second
	// MaxToolTimeout is the most an agent tool call's timeout may be: the
	// Bash tools' conventional 10 minutes. The operator's Maxima.Timeout
	// may lower it, not raise it.
	MaxToolTimeout = 600 * time.Second
)

// ToolTimeouts returns an agent tool call's default timeout and its
// maximum: m.ToolTimeout (zero: DefaultToolTimeout) and the lower of
// m.Timeout (zero: box.MaxTimeout) and MaxToolTimeout, the default lowered
// to the maximum.
func (m Maxima) ToolTimeouts() (def, max time.Duration) {
	max = min(m.maxTimeout(), MaxToolTimeout)
	def = m.ToolTimeout
	if def == 0 {
		def = DefaultToolTimeout
	}
	return min(def, max), max
}

// maxTimeout is m.Timeout, zero meaning box.MaxTimeout.
func (m Maxima) maxTimeout() time.Duration {
	if m.Timeout == 0 {
		return box.MaxTimeout
	}
	return m.Timeout
}

// SetTimeout sets the timeout req asks for as the caller gave it: n units,
// named field (for the message that refuses it), zero meaning the default.
// Spec.Timeout gets it, saturated at box.MaxTimeout, which no maximum
// exceeds; the chain checks n itself against the maximum.
func (req *Request) SetTimeout(field string, n int64, unit time.Duration) {
	req.TimeoutField, req.TimeoutValue, req.TimeoutUnit = field, n, unit
	switch {
	case n > int64(box.MaxTimeout/unit):
		req.Spec.Timeout = box.MaxTimeout
	default:
		req.Spec.Timeout = time.Duration(n) * unit
	}
}

// timeoutAsked is the timeout req asks for as the caller gave it: its
// field, value and unit, by default Spec.Timeout as timeout_ms.
func timeoutAsked(req Request) (field string, n int64, unit time.Duration) {
	if req.TimeoutField != "" && req.TimeoutUnit > 0 {
		return req.TimeoutField, req.TimeoutValue, req.TimeoutUnit
	}
	return "timeout_ms", int64(req.Spec.Timeout / time.Millisecond), time.Millisecond
}

// ToolCallTimeout is the timeout an agent tool's call that asks for asked
// (zero: none) runs under within m: the tools' default if it asks for none,
// the tools' maximum if it asks for more (see ToolTimeouts). job is the
// sessions' job timeout for a background job, zero for a call: a job that
// asks for none runs up to it, and one may ask for no more than the lower
// of it and the tools' maximum. The chain gives a Request.Tool call this
// timeout; a front end calls it to say what the call got.
func (m Maxima) ToolCallTimeout(asked, job time.Duration) time.Duration {
	def, max := m.ToolTimeouts()
	if job > 0 {
		def, max = job, min(max, job)
	}
	switch {
	case asked == 0:
		return def
	case asked > max:
		return max
	}
	return asked
}

// resolveTimeout settles the timeout of s, req's spec after sessionSpec,
// within max (the maxima sessionSpec left: a background job's reach the
// sessions' job timeout). A request refuses a timeout above the maximum,
// naming it as the caller did; an agent tool's call (req.Tool) gets
// call.ToolTimeout. call are the daemon's maxima for a call.
func resolveTimeout(req Request, s *jail.Spec, call, max Maxima, background bool) error {
	if !req.Tool {
		return checkTimeout(req, s.Timeout, max.Timeout)
	}
	field, n, _ := timeoutAsked(req)
	if n < 0 || s.Timeout < 0 {
		return invalid(field, "%d: must not be negative (0 means the default)", n)
	}
	var job time.Duration
	if background {
		job = max.maxTimeout()
	}
	s.Timeout = call.ToolCallTimeout(s.Timeout, job)
	return nil
}
