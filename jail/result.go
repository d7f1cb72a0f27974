package jail

import "time"

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
	// [Pool]'s, or a workspace's made [WithPrestart]).
	Prestarted bool `json:",omitempty"`

	// Egress is what the sandbox's proxy counted, for a run given egress
	// (see [Egress]); nil otherwise.
	Egress *EgressUsage `json:",omitempty"`
}
