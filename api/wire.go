package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/box"
)

// This file holds every JSON field name of the daemon's API and audit log,
// so that the wire format is read, reviewed and changed in one place. Keep it
// in step with openapi.yaml (TestOpenAPIMentionsEveryField checks the names).

// Request is the body of POST /run and POST /raw. Exactly one of Command
// (shell mode) and Executable (argv mode) is required. Optional fields are
// pointers where an explicit zero must differ from "not given"; an explicit
// zero or negative limit is an error, not "the default".
type Request struct {
	// Command is a shell command line, run as /bin/sh -c COMMAND.
	Command string `json:"command,omitempty"`
	// Executable and Args run a program directly, without a shell.
	// Executable is looked up in the sandbox's PATH.
	Executable string   `json:"executable,omitempty"`
	Args       []string `json:"args,omitempty"`

	// Stdin is text for the command's standard input; StdinB64 is the
	// same for arbitrary bytes, base64-encoded. At most one may be set.
	// Without either the command reads /dev/null.
	Stdin    *string `json:"stdin,omitempty"`
	StdinB64 Base64  `json:"stdin_b64,omitempty"`

	// Env adds environment variables to the sandbox's fixed ones.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory inside the sandbox: the sandboxes'
	// working directory (the default: /work, or the daemon's
	// --sandbox-workdir), /tmp or below them.
	Cwd string `json:"cwd,omitempty"`

	// TimeoutSeconds (the name agent tools' /run APIs use) or TimeoutMS bound the run's
	// wall-clock time; at most one may be set. Unset means the jail's
	// default timeout, capped at the operator's maximum.
	TimeoutSeconds *int64 `json:"timeout_seconds,omitempty"`
	TimeoutMS      *int64 `json:"timeout_ms,omitempty"`

	// Limits that may only tighten the operator's maximums. Unset means
	// the jail's default, capped at the operator's maximum.
	MemoryBytes    *int64   `json:"memory_bytes,omitempty"`
	Pids           *int64   `json:"pids,omitempty"`
	CPUs           *float64 `json:"cpus,omitempty"`
	TmpfsSizeBytes *int64   `json:"tmpfs_size_bytes,omitempty"`
	MaxOutputBytes *int64   `json:"max_output_bytes,omitempty"`

	// SessionID runs the command in that session (see api/session.go): a
	// fresh container on the session's /work, cwd and env.
	SessionID string `json:"session_id,omitempty"`
	// RunInBackground (POST /run with a session only) answers at once
	// with 202 and a JobAccepted; the job runs on.
	RunInBackground bool `json:"run_in_background,omitempty"`
	// Egress asks for network access through jaild's egress proxy: true
	// (the operator's allowlist), false (none), or a list of host:port
	// patterns that may only narrow the operator's list. Unset means the
	// daemon's --egress-default.
	Egress *Egress `json:"egress,omitempty"`
}

// Verdict is how a run ended and what it used: everything of a
// [box.Result] but the output itself and the exit code (whose name differs
// between /run and the /raw exit event). It is the one definition of these
// fields for /run, the /raw exit event and the MCP tools' structured output
// (whose schema its jsonschema tags describe); the audit record shares
// [Usage].
type Verdict struct {
	ID              string `json:"id" jsonschema:"The sandbox's id, as in jaild's logs."`
	Signal          string `json:"signal,omitempty" jsonschema:"The signal that killed the command (e.g. SIGKILL), if one did."`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"Whether part of stdout was elided."`
	StderrTruncated bool   `json:"stderr_truncated" jsonschema:"Whether part of stderr was elided."`
	TimedOut        bool   `json:"timed_out" jsonschema:"Whether the timeout expired and the sandbox was killed; the output is partial."`
	Canceled        bool   `json:"canceled,omitempty" jsonschema:"Whether the caller went away and the sandbox was killed."`
	OOMKilled       bool   `json:"oom_killed" jsonschema:"Whether a process was killed for exceeding the sandbox's memory limit."`
	PidsLimitHit    bool   `json:"pids_limit_hit" jsonschema:"Whether a fork or thread creation was refused by the sandbox's process limit."`
	Usage
}

// Usage is what a run used.
type Usage struct {
	DurationMS      int64 `json:"duration_ms" jsonschema:"Wall-clock run time in milliseconds."`
	CPUMS           int64 `json:"cpu_ms" jsonschema:"CPU time used by all processes of the sandbox, in milliseconds."`
	MemoryPeakBytes int64 `json:"memory_peak_bytes" jsonschema:"Peak memory use of the sandbox in bytes."`
	StdoutBytes     int64 `json:"stdout_bytes" jsonschema:"How many bytes the command wrote to stdout, kept or not."`
	StderrBytes     int64 `json:"stderr_bytes" jsonschema:"How many bytes the command wrote to stderr, kept or not."`
	// The egress proxy's counters: present (zero or not) for a run given
	// network access, absent for any other.
	EgressBytesIn     *int64 `json:"egress_bytes_in,omitempty" jsonschema:"Bytes received from upstreams through the egress proxy; present only for a run given egress."`
	EgressBytesOut    *int64 `json:"egress_bytes_out,omitempty" jsonschema:"Bytes sent to upstreams through the egress proxy."`
	EgressConnections *int64 `json:"egress_connections,omitempty" jsonschema:"Connections the egress proxy let through."`
	EgressDenied      *int64 `json:"egress_denied,omitempty" jsonschema:"Connections the egress proxy refused."`
}

// Response is the body of a successful POST /run: the common
// {stdout, stderr, exit_code, duration_ms} of sandboxed /run APIs, extended with the jail's verdict.
// A command that fails, times out or is killed is still a successful run.
//
// Stdout and Stderr are the output as text when it is valid UTF-8. Output
// that is not is sent exactly, base64-encoded, in StdoutB64 or StderrB64
// instead, and its text field is empty. The daemon writes this body as it
// encodes it (see writeResult), in this field order.
type Response struct {
	Stdout    string `json:"stdout"`
	StdoutB64 []byte `json:"stdout_b64,omitempty"`
	Stderr    string `json:"stderr"`
	StderrB64 []byte `json:"stderr_b64,omitempty"`
	// ExitCode is the command's exit status, or -1 if a signal killed it.
	ExitCode int `json:"exit_code"`
	Verdict
}

// ErrorResponse is the body of every 4xx and 5xx answer of /run and of
// /raw before its stream starts.
//
// A policy denial has the policy-runner convention's shape, and still the
// code every other error has: {"error":"policy_denied","message":"Command
// not allowed: rm","code":"policy_denied"}, with reasons and
// denied_command added when the policy explains itself. Other errors carry
// their message in Error and no Message; Text returns the message of
// either.
type ErrorResponse struct {
	// Error is the message, or for a policy denial the word
	// "policy_denied" (the convention's error name).
	Error string `json:"error"`
	// Message is the message when Error is a name: policy denials.
	Message string `json:"message,omitempty"`
	// Code is one of the Code* constants; clients branch on it, not on
	// the message.
	Code string `json:"code"`
	// Field names the request field at fault, for Code "invalid".
	Field string `json:"field,omitempty"`
	// Denial is what the policy said of a denial, if anything; Message
	// ends with it too, a line each (see DeniedError.Error). A pointer,
	// so that ErrorResponse stays comparable.
	*Denial
}

// Denial explains a policy denial: its fields are in the 403 body and
// /raw's error event, beside the message.
type Denial struct {
	// Reasons are the policy's own explanations.
	Reasons []string `json:"reasons,omitempty"`
	// DeniedCommand is the simple command of a shell string that was
	// refused, as argv in shell words.
	DeniedCommand string `json:"denied_command,omitempty"`
}

// Text is the message for a human: Message when there is one, else Error.
func (e *ErrorResponse) Text() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Error
}

// NewErrorResponse is the answer to an error with the given code and
// message, in the shape the code calls for (see ErrorResponse).
func NewErrorResponse(code, message string) *ErrorResponse {
	if code == CodePolicyDenied {
		return &ErrorResponse{Error: CodePolicyDenied, Message: message, Code: code}
	}
	return &ErrorResponse{Error: message, Code: code}
}

// Event is one line of the NDJSON stream of POST /raw, in the shapes of
// the policy-runner convention's /raw:
//
//	{"event":"start","request_id":"..."}
//	{"event":"stdout","data_b64":"..."}
//	{"event":"stderr","data_b64":"..."}
//	{"event":"exit","exitCode":0, ...Verdict}
//	{"event":"error","message":"...","code":"...", "reasons":[...], "denied_command":"..."}
//
// exit and error are final: exactly one of them ends every stream that
// started.
type Event struct {
	Event     string `json:"event"`
	RequestID string `json:"request_id,omitempty"`
	// Data is a chunk of output as the command wrote it.
	Data []byte `json:"data_b64,omitempty"`
	// ExitCode (that convention's camelCase name) is set on the exit event only.
	ExitCode *int `json:"exitCode,omitempty"`
	*Verdict
	Message string `json:"message,omitempty"`
	Code    string `json:"code,omitempty"`
	// Denial explains a policy denial, as in ErrorResponse.
	*Denial
}

// Event kinds.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventError  = "error"
)

// Error codes of ErrorResponse.Code and Event.Code.
const (
	CodeInvalid          = "invalid"                // 400: a field is wrong; see Field
	CodeBadJSON          = "bad_json"               // 400: malformed JSON or unknown field
	CodeUnauthorized     = "unauthorized"           // 401
	CodeForbidden        = "forbidden"              // 403: Host or Origin not allowed
	CodePolicyDenied     = "policy_denied"          // 403: the operator's policy refused the command
	CodeTooLarge         = "too_large"              // 413: body above the limit
	CodeUnsupportedMedia = "unsupported_media_type" // 415: not application/json
	CodeBodyTimeout      = "body_timeout"           // 408: body not sent in time
	CodeNotFound         = "not_found"              // 404: no such session or job
	CodeCommandNotFound  = "command_not_found"      // 422: command not found in the sandbox (older daemons answered not_found; package client reads that as this)
	CodeLimit            = "limit"                  // 409: too many sessions, or jobs in a session
	CodeNotExecutable    = "not_executable"         // 422: command not executable
	CodeBusy             = "busy"                   // 429: admission queue full or wait expired
	CodeCapacity         = "capacity"               // 503: the sandboxes' pids budget is used up; see Retry-After
	CodeShuttingDown     = "shutting_down"          // 503: the daemon is stopping
	CodeDraining         = "draining"               // 503: the daemon takes no new sessions or one-shot runs; retry elsewhere
	CodeSessionLost      = "session_lost"           // 410: the node that held the session is gone, and the session's workspace with it
	CodeUnavailable      = "unavailable"            // 503: the daemon's worker is restarting; see Retry-After
	CodeCanceled         = "canceled"               // 503: the run was cancelled
	CodeNotRoot          = "not_root"               // 500: the daemon cannot build sandboxes
	CodeUnsupported      = "unsupported"            // 500: the host lacks sandbox support
	CodeRootfs           = "rootfs"                 // 500: the root filesystem is unusable
	CodeInternal         = "internal"               // 500
)

// Health is the body of GET /healthz.
type Health struct {
	// Status is "ok", "draining" or "unhealthy".
	Status string `json:"status"`
	// Jail is "ok" or why sandboxes cannot run on this host.
	Jail string `json:"jail"`
	// Policy is the operator's policy: "off", "ok" with its revision, or
	// "deny-all" with why (the daemon then refuses every run).
	Policy string `json:"policy,omitempty"`
	// Load, on /readyz, is how busy the daemon is, lower is better: the
	// requests it is serving (runs, streams, calls in sessions; not
	// probes) plus its live sessions. A fleet sends new work to the
	// daemon of least load (package route).
	Load *float64 `json:"load,omitempty"`
}

// Verdicts, as the audit log and the runs_total metric name them. They form
// a small fixed set so that metric cardinality stays bounded.
const (
	VerdictOK            = "ok"           // exited 0
	VerdictExitNonzero   = "exit_nonzero" // exited with another code
	VerdictSignaled      = "signaled"     // killed by a signal it was not sent by jaild
	VerdictTimedOut      = "timed_out"
	VerdictOOMKilled     = "oom_killed"
	VerdictPidsLimit     = "pids_limit"
	VerdictCanceled      = "canceled" // the caller went away or the daemon stopped
	VerdictBusy          = "busy"     // rejected by admission control
	VerdictInvalid       = "invalid"
	VerdictNotFound      = "not_found"
	VerdictNotExecutable = "not_executable"
	VerdictDenied        = "denied" // refused by the operator's policy
	VerdictError         = "error"
	// VerdictStarted: a background job was started (its end is not
	// audited: GET the job for its verdict).
	VerdictStarted = "started"
	// VerdictRejected: the HTTP request was refused before it became a
	// run (bad body, authentication, Host or Origin, draining); the
	// record's reason says which.
	VerdictRejected = "rejected"
)

// AuditRecord is one line of the audit log: who ran what, with which limits,
// and how it ended. It never holds the command's output, and holds the
// command itself only if the operator asked for it (the hash always).
type AuditRecord struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id,omitempty"`
	// Action, for a request that is not a run, names it as the policy
	// does ("session.create", "session.env"); empty for a run.
	Action string `json:"action,omitempty"`
	// Caller is the token's name, or the peer ("uid:1000",
	// "127.0.0.1:53211") when the daemon runs without tokens.
	Caller string `json:"caller"`
	// CommandSHA256 is the hex SHA-256 of the argv joined by NUL bytes,
	// so equal commands can be matched without logging them.
	CommandSHA256 string   `json:"command_sha256"`
	Command       []string `json:"command,omitempty"`
	// EnvKeys lists the names of the requested variables; values may be
	// secrets and are never logged.
	EnvKeys []string `json:"env_keys,omitempty"`
	// Description is what the caller said the command is for (the MCP
	// bash tool's description).
	Description string `json:"description,omitempty"`
	// SessionID is the session the run was in; JobID the background
	// job it started, if it was one.
	SessionID  string      `json:"session_id,omitempty"`
	JobID      string      `json:"job_id,omitempty"`
	Cwd        string      `json:"cwd,omitempty"`
	StdinBytes int64       `json:"stdin_bytes,omitempty"`
	Limits     AuditLimits `json:"limits"`

	Verdict string `json:"verdict"`
	// Reason is, for VerdictRejected, the requests_rejected_total reason
	// ("bad_json", "unauthorized", "forbidden", ...); Status the HTTP
	// status of the refusal.
	Reason string `json:"reason,omitempty"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// SandboxID is the jail's id of the sandbox, empty if none was built.
	SandboxID string `json:"sandbox_id,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Signal    string `json:"signal,omitempty"`
	WaitMS    int64  `json:"wait_ms"` // time spent queued for admission
	Usage
}

// AuditLimits are the effective limits of an audited run.
type AuditLimits struct {
	MemoryBytes    int64   `json:"memory_bytes"`
	Pids           int64   `json:"pids"`
	CPUs           float64 `json:"cpus"`
	TmpfsSizeBytes int64   `json:"tmpfs_size_bytes"`
	TimeoutMS      int64   `json:"timeout_ms"`
	MaxOutputBytes int64   `json:"max_output_bytes"`
}

// VerdictOf reduces a Result to its fields for the wire.
func VerdictOf(res *box.Result) Verdict {
	return Verdict{
		ID:              res.ID,
		Signal:          res.Signal,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		TimedOut:        res.TimedOut,
		Canceled:        res.Canceled,
		OOMKilled:       res.OOMKilled,
		PidsLimitHit:    res.PidsLimitHit,
		Usage:           UsageOf(res),
	}
}

// ResponseOf is the /run answer for res: the output as text when it is
// valid UTF-8, else exactly in StdoutB64 and StderrB64. (The daemon writes
// the same answer as it encodes it, without building it in memory.)
func ResponseOf(res *box.Result) *Response {
	r := &Response{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode, Verdict: VerdictOf(res)}
	if !utf8.ValidString(r.Stdout) {
		r.Stdout, r.StdoutB64 = "", []byte(res.Stdout)
	}
	if !utf8.ValidString(r.Stderr) {
		r.Stderr, r.StderrB64 = "", []byte(res.Stderr)
	}
	return r
}

// UsageOf is what res used.
func UsageOf(res *box.Result) Usage {
	u := Usage{
		DurationMS:      res.Duration.Milliseconds(),
		CPUMS:           res.CPUTime.Milliseconds(),
		MemoryPeakBytes: res.MemoryPeak,
		StdoutBytes:     res.StdoutBytes,
		StderrBytes:     res.StderrBytes,
	}
	if res.Egress != nil {
		e := *res.Egress // the verdict's own copy
		u.EgressBytesIn, u.EgressBytesOut, u.EgressConnections, u.EgressDenied = &e.BytesIn, &e.BytesOut, &e.Connections, &e.Denied
	}
	return u
}

// Base64 is stdin_b64: bytes sent as a base64 string. Unlike a
// plain []byte field, which encoding/json also fills from an array of
// numbers, it takes a string only: a request has one spelling.
type Base64 []byte

// UnmarshalJSON implements json.Unmarshaler.
func (b *Base64) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("stdin_b64 must be a base64 string")
	}
	dec, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("stdin_b64 is not base64: %w", err)
	}
	*b = dec
	return nil
}

// Egress is the request's "egress" field: a boolean, or a list of host:port
// patterns. Its JSON decoding is strict: anything else is an error.
type Egress struct {
	// Allowed is the boolean form, or true with a list.
	Allowed bool
	// Hosts, if not nil, narrows the operator's allowlist to these
	// patterns ("api.example.com:443", "*.pypi.org:443").
	Hosts []string
}

// MarshalJSON writes false, true, or the list.
func (e Egress) MarshalJSON() ([]byte, error) {
	switch {
	case e.Hosts != nil:
		return json.Marshal(e.Hosts)
	case e.Allowed:
		return []byte("true"), nil
	}
	return []byte("false"), nil
}

// UnmarshalJSON takes a boolean or a list of strings.
func (e *Egress) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true":
		*e = Egress{Allowed: true}
		return nil
	case "false":
		*e = Egress{}
		return nil
	}
	var hosts []string
	if err := json.Unmarshal(b, &hosts); err != nil || hosts == nil {
		return errors.New("egress must be true, false or a list of host:port patterns")
	}
	*e = Egress{Allowed: true, Hosts: hosts}
	return nil
}
