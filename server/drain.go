package server

import (
	"net/http"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/run"
)

// A draining server is one a load balancer should take out of rotation
// without losing anything in it: it refuses work that could go to another
// node (one-shot runs, new sessions, new MCP sessions) with 503 draining
// and Retry-After, and keeps serving what only it holds (calls in its
// sessions and MCP sessions, their files and jobs) until the daemon shuts
// down. /readyz says so; /livez does not, for a draining process is alive.

// Drain starts draining. It reports whether this call started it.
func (s *Server) Drain() bool {
	if s.refusingNew.Swap(true) {
		return false
	}
	s.log.Info("draining: refusing new sessions and one-shot runs", "running", s.inflightCount())
	return true
}

// Draining reports whether the server is draining or shutting down.
func (s *Server) Draining() bool { return s.refusingNew.Load() || s.draining.Load() }

// refuseNew answers a request for new work while draining, and reports
// whether it did.
func (s *Server) refuseNew(w http.ResponseWriter, r *http.Request) bool {
	if !s.refusingNew.Load() {
		return false
	}
	w.Header().Set("Retry-After", "1")
	s.reject(w, r, run.RejectDraining, http.StatusServiceUnavailable, &api.ErrorResponse{
		Error: "this jaild is draining: it takes no new sessions or one-shot runs; retry (a load balancer sends it to another node)",
		Code:  api.CodeDraining})
	return true
}

// refuseNewMCP refuses a request that would open an MCP session (one
// without Mcp-Session-Id) while draining; requests of open sessions pass.
func (s *Server) refuseNewMCP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == "" && r.Method == http.MethodPost && s.refuseNew(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleLive answers GET /livez: the process serves HTTP. It fails only
// once the server is shutting down, so that an orchestrator does not
// restart a draining daemon and lose its sessions.
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, &api.Health{Status: "shutting_down"})
		return
	}
	writeJSON(w, http.StatusOK, &api.Health{Status: "ok"})
}

// handleReady answers GET /readyz: whether to send this daemon new work.
// Not while it drains or shuts down, nor while /healthz fails (sandboxes
// cannot start, or the policy denies everything).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	s.probes.Add(1)
	defer s.probes.Add(-1)
	if s.Draining() {
		writeJSON(w, http.StatusServiceUnavailable, &api.Health{Status: "draining", Load: s.load()})
		return
	}
	s.serveHealth(w, r, s.load())
}

// load is the Load /readyz reports.
func (s *Server) load() *float64 {
	n := s.inflightCount() - int(s.probes.Load())
	if s.opts.Sessions != nil {
		n += s.opts.Sessions.Len()
	}
	l := float64(max(n, 0))
	return &l
}
