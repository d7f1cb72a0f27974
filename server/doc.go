// Package server is jaild's HTTP front end: the daemon that many agents call
// at once to run commands in fresh sandboxes.
//
// Endpoints (see openapi.yaml, served at GET /openapi.yaml):
//
//	POST /run          JSON request in, JSON result out when the command ends
//	POST /raw          the same request, answered as an NDJSON event stream
//	GET  /healthz      liveness, and whether sandboxes work on this host
//	GET  /metrics      Prometheus metrics from the server's own registry
//	     /mcp          optional MCP endpoint (Options.MCP), behind the same auth
//
// The work is done by a [Runner]; the daemon's runner is a chain of
// decorators around the jail, built by [Chain]:
//
//	Enforce (operator maxima) -> Audit -> Admit (concurrency, queue) -> Instrument (metrics) -> jail
//
// Every front end (HTTP here, MCP elsewhere) that runs through the same chain
// gets the same limits, admission control, audit log and metrics.
//
// Every JSON field name of the API lives in api.go.
package server
