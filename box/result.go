package box

import (
	"fmt"
	"strconv"
	"time"
)

// EgressUsage is what a sandbox's proxy counted.
type EgressUsage struct {
	// BytesIn were received from upstreams and sent to the sandbox,
	// BytesOut the other way.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Connections were let through; Denied were refused.
	Connections int64 `json:"connections"`
	Denied      int64 `json:"denied"`
}

// Elide is the marker that stands in output for n bytes that were cut from
// its middle. It is on a line of its own so that both people and models can
// tell a partial result from a complete one.
func Elide(n int64) string {
	return fmt.Sprintf("\n[... jaild: %s bytes of output elided ...]\n", strconv.FormatInt(n, 10))
}

// Result is what one run produced, including the verdict. Stdout and Stderr
// hold the bytes exactly as the command wrote them (they may not be UTF-8),
// elided as described at [Command.MaxOutput]. It is a Go type; package api
// derives the wire and MCP shapes from it.
type Result struct {
	ID string

	// ExitCode is the command's exit status, or -1 if a signal killed it.
	ExitCode int
	// Signal names the signal that killed the command ("SIGKILL"), if any.
	Signal string

	Stdout string
	Stderr string
	// StdoutBytes and StderrBytes count everything the command wrote,
	// kept or not.
	StdoutBytes     int64
	StderrBytes     int64
	StdoutTruncated bool
	StderrTruncated bool

	// TimedOut: the timeout expired and jaild killed the sandbox.
	TimedOut bool
	// Canceled: the caller's context ended (e.g. a client disconnected)
	// and jaild killed the sandbox.
	Canceled bool
	// OOMKilled: the kernel's OOM killer killed a process of the sandbox,
	// read from the cgroup's oom_kill counter (the exit code can be 0).
	OOMKilled bool
	// PidsLimitHit: a fork or clone was refused by the pids limit.
	PidsLimitHit bool

	// Duration is the command's wall-clock time, from its release to its
	// end (the timeout counts from the same moment), not the sandbox's
	// set-up and teardown.
	Duration   time.Duration
	CPUTime    time.Duration
	MemoryPeak int64
	Limits     Limits

	// Prestarted: the command ran in a sandbox started ahead of time (a
	// jail Pool's, or a workspace's made with jail.WithPrestart).
	Prestarted bool `json:",omitempty"`

	// Egress is what the sandbox's proxy counted, for a run given egress
	// (package jail's Spec.Egress); nil otherwise.
	Egress *EgressUsage `json:",omitempty"`
}
