// Package run is the chain every front end runs a request through, built by
// [Chain] around the jail:
//
//	maxima (the operator's) -> Audit -> Egress (network the request may have) -> Decide (policy) -> Admit (concurrency, queue, output memory) -> Instrument (metrics) -> jail, or the session
//
// HTTP, MCP over HTTP and MCP over stdio all build it with Chain, so every
// run gets the same limits, admission control, audit record and metrics.
// A run travels as a [Request]: the spec, who asked and through what
// (caller, request id, front end, description: the audit record's and the
// policy's input), and the front end's hooks, explicit fields rather than
// context values (OnAdmit, when the run leaves the queue; KeepOutput, to
// hold the output memory until the answer is written).
// A request that names a session (Request.SessionID) goes through the same
// links and ends in the session manager (ChainOptions.Sessions) rather than
// the jail: the maxima link first checks that the session is the Owner's (compared
// whole, see package caller) and gives the request the session's limits
// where it set none; a background job (Request.Background) is admitted,
// decided and audited at its start (verdict "started", Request.JobID), and
// gives its admission slot back once started.
// A refusal by the maxima is audited too; requests refused before they
// become runs are audited by the front end through [AuditLog.Rejected].
// The maxima link owns the defaults: a front end leaves what its caller did
// not ask for unset, and an agent tool's call (Request.Tool: the MCP tools)
// gets their timeout convention there too (ToolTimeouts).
// Sessions are made and changed through [Sessions], for every front end,
// by the same maxima, egress rules and policy, every refusal audited.
package run
