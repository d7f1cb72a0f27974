package jail

import "time"

// Result is what one run produced, including the verdict. Stdout and Stderr
// hold the bytes exactly as the command wrote them (they may not be UTF-8;
// encoding/json replaces invalid sequences with U+FFFD), elided as described
// at [Command.MaxOutput].
type Result struct {
	ID string `json:"id"`

	// ExitCode is the command's exit status, or -1 if a signal killed it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`

	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutBytes and StderrBytes count everything the command wrote,
	// kept or not.
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	StdoutTruncated bool  `json:"stdout_truncated"`
	StderrTruncated bool  `json:"stderr_truncated"`

	// TimedOut: the timeout expired and jaild killed the sandbox.
	TimedOut bool `json:"timed_out"`
	// Canceled: the caller's context ended (e.g. a client disconnected)
	// and jaild killed the sandbox.
	Canceled bool `json:"canceled,omitempty"`
	// OOMKilled: the kernel's OOM killer killed a process of the sandbox,
	// read from the cgroup's oom_kill counter (the exit code can be 0).
	OOMKilled bool `json:"oom_killed"`
	// PidsLimitHit: a fork or clone was refused by the pids limit.
	PidsLimitHit bool `json:"pids_limit_hit"`

	// Duration is the command's wall-clock time, from its release to its
	// end (the timeout counts from the same moment), not the sandbox's
	// set-up and teardown.
	Duration   time.Duration `json:"-"`
	DurationMS int64         `json:"duration_ms"`
	CPUTime    time.Duration `json:"-"`
	CPUMS      int64         `json:"cpu_ms"`
	MemoryPeak int64         `json:"memory_peak_bytes"`
	Limits     Limits        `json:"-"`
}
