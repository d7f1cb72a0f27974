package api

import "time"

// The wire types of sessions (see session.Manager and docs/sessions.md):
//
//	POST   /sessions                          SessionRequest -> 201 Session
//	GET    /sessions                          -> 200 SessionList (the caller's own)
//	GET    /sessions/{id}                     -> 200 Session
//	PATCH  /sessions/{id}                     SessionPatch -> 200 Session
//	DELETE /sessions/{id}                     -> 204 (kills its jobs, removes its workspace)
//	POST   /run, /raw with "session_id"       a call in the session (fresh container, the session's /work)
//	POST   /run with "run_in_background"      -> 202 JobAccepted
//	GET    /sessions/{id}/jobs                -> 200 JobList
//	GET    /sessions/{id}/jobs/{job}          ?stdout_offset=N&stderr_offset=M (or offset=N for both)
//	                                          &wait_ms=N[&until=output] -> 200 Job
//	DELETE /sessions/{id}/jobs/{job}          -> 200 Job (killed, once it has ended)
//	PUT    /sessions/{id}/files/{path...}     body = bytes, or a tar (Content-Type: application/x-tar) -> 204
//	GET    /sessions/{id}/files/{path...}     a file's bytes; a directory: FileList, or a tar (Accept: application/x-tar)
//	DELETE /sessions/{id}/files/{path...}     -> 204
//
// Another caller's session is 404, as one that does not exist.

// The headers of a single file's metadata in the files API, on a GET's
// answer and (the time) on a PUT: its permission bits in octal ("0755";
// a PUT gives them as ?mode=) and its modification time in RFC 3339 with
// nanoseconds. Last-Modified has whole seconds only, which makes a copy
// look older or newer than its source to make. Archives carry both in
// their headers (PAX records keep nanoseconds).
const (
	HeaderFileMode  = "X-Jaild-Mode"
	HeaderFileMtime = "X-Jaild-Mtime"
)

// SessionRequest is the body of POST /sessions. Every field is optional.
type SessionRequest struct {
	// TTLSeconds is the idle time after which the session expires
	// (default: the daemon's --session-ttl, at most its maximum lifetime).
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
	// Env is in every call of the session.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is where calls start (the working directory, /work by default,
	// or below) until a call changes it.
	Cwd string `json:"cwd,omitempty"`
	// Limits are each call's sandbox resources, within the operator's
	// maximums; a call may set its own.
	Limits *SessionLimits `json:"limits,omitempty"`
	// WorkspaceBytes is the size of /work (default and maximum: the
	// daemon's --workspace-size).
	WorkspaceBytes *int64 `json:"workspace_bytes,omitempty"`
	// Egress gives every call and job of the session network access
	// through the daemon's proxy, as a request's egress field does (true:
	// the allowlist; false: none; a list: that list, which may only
	// narrow the allowlist). It is decided here, once: a call in the
	// session may not ask for it.
	Egress *Egress `json:"egress,omitempty"`
}

// SessionLimits are the per-call limits of a session, named as in Request.
type SessionLimits struct {
	MemoryBytes    *int64   `json:"memory_bytes,omitempty"`
	Pids           *int64   `json:"pids,omitempty"`
	CPUs           *float64 `json:"cpus,omitempty"`
	TmpfsSizeBytes *int64   `json:"tmpfs_size_bytes,omitempty"`
}

// SessionPatch is the body of PATCH /sessions/{id}. Env entries replace
// the session's variables of the same name; a null value removes one.
type SessionPatch struct {
	Env map[string]*string `json:"env,omitempty"`
}

// Session describes one session.
type Session struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the session expires if nothing runs in it from
	// now on.
	ExpiresAt  time.Time `json:"expires_at"`
	TTLSeconds int64     `json:"ttl_seconds"`
	// WorkDir is where the sandboxes see the session's workspace: their
	// working directory and HOME (the daemon's --sandbox-workdir, /work
	// unless the operator chose another). Paths of the files API are
	// relative to it. An older daemon leaves it out: /work.
	WorkDir            string            `json:"workdir,omitempty"`
	Cwd                string            `json:"cwd"`
	Env                map[string]string `json:"env"`
	WorkspaceBytesMax  int64             `json:"workspace_bytes_max"`
	WorkspaceBytesUsed int64             `json:"workspace_bytes_used"`
	Jobs               int               `json:"jobs"`
	RunningJobs        int               `json:"running_jobs"`
	// Egress is what the session's proxy counted so far; absent if the
	// session has no egress.
	Egress *SessionEgress `json:"egress,omitempty"`
}

// SessionEgress is what a session's egress proxy counted: bytes from
// upstreams to the sandboxes (in) and back (out), connections let through
// and refused.
type SessionEgress struct {
	BytesIn     int64 `json:"bytes_in"`
	BytesOut    int64 `json:"bytes_out"`
	Connections int64 `json:"connections"`
	Denied      int64 `json:"denied"`
}

// SessionList is the body of GET /sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// JobAccepted is the 202 body of a background run.
type JobAccepted struct {
	JobID     string `json:"job_id"`
	SessionID string `json:"session_id"`
	// Status is the job's URL path: GET it for the output and the verdict.
	Status string `json:"status"`
}

// Job is a background job's state, and its output from the requested
// offsets on.
type Job struct {
	JobID   string   `json:"job_id"`
	Command []string `json:"command"`
	// State is "running" or "exited" (ended, whatever the cause: the
	// verdict says which).
	State     string     `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Stdout and Stderr are the output kept from the requested offsets
	// on; StdoutOffset and StderrOffset are the offsets to ask for next.
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutOffset int64  `json:"stdout_offset"`
	StderrOffset int64  `json:"stderr_offset"`
	// ExitCode and Verdict are set once the job has ended.
	ExitCode *int     `json:"exit_code,omitempty"`
	Verdict  *Verdict `json:"verdict,omitempty"`
	// Error is why the job could not run or was cut short, if it was.
	Error string `json:"error,omitempty"`
}

// JobList is the body of GET /sessions/{id}/jobs (without output).
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// FileInfo is one entry of a directory listing.
type FileInfo struct {
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, e.g. "0644"
	ModTime time.Time `json:"mod_time"`
	// Target is a symlink's target, as written (never followed).
	Target string `json:"target,omitempty"`
}

// FileList is the body of GET on a directory.
type FileList struct {
	Path    string     `json:"path"` // in the sandbox, e.g. "/work/src" (Session.WorkDir's)
	Entries []FileInfo `json:"entries"`
}
