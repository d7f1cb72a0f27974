// Package server is jaild's HTTP front end: the daemon that many agents call
// at once to run commands in fresh sandboxes.
//
// Endpoints (see openapi.yaml, served at GET /openapi.yaml):
//
//	POST /run          JSON request in, JSON result out when the command ends
//	POST /raw          the same request, answered as an NDJSON event stream
//	GET  /healthz      liveness, and whether sandboxes work on this host
//	GET  /livez        alive, while draining too; GET /readyz: ready for
//	                   new work (fails while draining: drain.go)
//	GET  /metrics      Prometheus metrics from the server's own registry
//	     /sessions...  sessions and their background jobs (Options.Sessions;
//	                   sessions.go, jobs.go), POST /sessions/{id}/run and
//	                   /raw, and a mount point for the files API
//	                   (Options.Files)
//	     /mcp          optional MCP endpoint (Options.MCP), behind the same auth
//
// The work is done by a [run.Runner], normally the chain of package run,
// which the MCP front ends (NewMCPServer for stdio, NewMCPHandler for
// Streamable HTTP) share; [Config.Run] builds the chain and the server in
// one go for a daemon. This package adds what is HTTP's own: bearer
// tokens and the caller they name (auth.go, package caller), Host and Origin
// checks against DNS rebinding (origin.go), connection limits (conns.go), a
// minimum body rate (pace.go), strict request reading, writing results as
// they are encoded (result.go), the drain before a stop (drain.go), and, in
// a fleet, routing to the daemon that holds a session (fleet.go, package
// route). The wire format is package api.
//
// With a session manager, each MCP session gets a jaild session of its own
// at its first tool call (mcp_session.go), and the MCP front end gains the
// background task tools (mcp_jobs.go).
package server
