// Package run is the chain every front end runs a request through, built by
// [Chain] around the jail:
//
//	Enforce (operator maxima) -> Audit -> Admit (concurrency, queue, output memory) -> Instrument (metrics) -> jail
//
// HTTP, MCP over HTTP and MCP over stdio all build it with Chain, so every
// run gets the same limits, admission control, audit record and metrics.
// A refusal by the maxima is audited too; requests refused before they
// become runs are audited by the front end through [AuditLog.Rejected].
package run
