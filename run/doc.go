// Package run is the chain every front end runs a request through, built by
// [Chain] around the jail:
//
//	maxima (the operator's) -> Audit -> Egress (network the request may have) -> Decide (policy) -> Admit (concurrency, queue, output memory) -> Instrument (metrics) -> jail, or the session
//
// HTTP, MCP over HTTP and MCP over stdio all build it with Chain, so every
// run gets the same limits, admission control, audit record and metrics.
// A run travels as a [Request] value that no link modifies: the spec, who
// asked and through what (caller, request id, front end, description: the
// audit record's and the policy's input), and the front end's hooks,
// explicit fields rather than context values (OnAdmit, when the run leaves
// the queue; KeepOutput, an [OutputHold] that keeps the output memory
// reserved until the answer is written). A link that changes what the
// rest of the chain sees (the effective limits, the egress) passes a copy
// on with a spec of its own.
// As with os/exec's Cmd, [Runner.Run] runs a request and waits for its
// result, and [Runner.Start] starts it as a background job of its session
// and returns the job's id; the session keeps the job's output and end.
// A request that names a session (Request.SessionID) goes through the same
// links and ends in the session manager (ChainOptions.Sessions) rather than
// the jail: the maxima link first checks that the session is the Owner's (compared
// whole, see package caller) and gives the request the session's limits
// where it set none; a background start is admitted, decided and audited
// at its start (verdict "started", with the job's id), and gives its
// admission slot back once started, its output memory once the job is
// forgotten.
// A refusal by the maxima is audited too; requests refused before they
// become runs are audited by the front end through [AuditLog.Rejected].
// The maxima link owns the defaults: a front end leaves what its caller did
// not ask for unset, and an agent tool's call (Request.Tool: the MCP tools)
// gets their timeout convention there too (ToolTimeouts).
// Sessions are made and changed through [Sessions], for every front end,
// by the same maxima, egress rules and policy, every refusal audited.
package run
