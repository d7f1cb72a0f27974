package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
	"github.com/jaild/jaild/session/files"
)

// The session endpoints (api/session.go lists them). A session belongs to
// its creator: the token's name or, without tokens, the peer (a unix
// socket's uid, a TCP peer's address without its port). Another caller's
// session is 404, like one that does not exist. Runs in a session go
// through the run chain (POST /run and /raw with session_id); these
// endpoints manage sessions and read jobs, which runs nothing.

// mountSessions adds the session endpoints to mux.
func (s *Server) mountSessions(mux *http.ServeMux) {
	mux.HandleFunc("POST /sessions", s.createSession)
	mux.HandleFunc("GET /sessions", s.listSessions)
	mux.HandleFunc("GET /sessions/{id}", s.getSession)
	mux.HandleFunc("PATCH /sessions/{id}", s.patchSession)
	mux.HandleFunc("DELETE /sessions/{id}", s.deleteSession)
	// A call in the session, as POST /run and /raw with session_id: the
	// id in the path lets whatever routes requests (package route, a
	// balancer) find the session without reading the body.
	mux.HandleFunc("POST /sessions/{id}/run", s.handleRun)
	mux.HandleFunc("POST /sessions/{id}/raw", s.handleRaw)
	mux.HandleFunc("GET /sessions/{id}/jobs", s.listJobs)
	mux.HandleFunc("GET /sessions/{id}/jobs/{job}", s.getJob)
	mux.HandleFunc("DELETE /sessions/{id}/jobs/{job}", s.killJob)
	// The files API: another package's handler (Options.Files), behind
	// the same authentication, given the caller's session.
	if s.opts.Files != nil {
		files := s.withSession(s.decideFiles(s.opts.Files))
		mux.Handle("/sessions/{id}/files", files) // the workspace itself: path ""
		mux.Handle("/sessions/{id}/files/{path...}", files)
	}
}

// allowed asks the policy (Options.PolicyEngine) about a session request
// that is not a run, and answers 403 policy_denied if it denies. Without
// a policy everything is allowed.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, in policy.Input) bool {
	if s.opts.PolicyEngine == nil {
		return true
	}
	in.Caller, in.FrontEnd = CallerFromContext(r.Context()).String(), "http"
	d := s.opts.PolicyEngine.Decide(r.Context(), requestIDFromContext(r.Context()), in)
	if d.Allow {
		return true
	}
	s.writeRunError(w, r, run.Refusal(r.Context(), &d), false)
	return false
}

// decideFiles asks the policy about each files API request before next
// serves it: a read (GET, HEAD), a write (PUT, POST: a file, or a tar
// unpacked below the path) or a removal (DELETE) of the path in the
// session's workspace, named as the sandbox sees it. It runs inside
// withSession.
func (s *Server) decideFiles(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := policy.ActionFilesWrite
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			action = policy.ActionFilesRead
		case http.MethodDelete:
			action = policy.ActionFilesDelete
		}
		workDir := s.opts.Sessions.WorkDir()
		if sess, ok := session.FromContext(r.Context()); ok {
			workDir = sess.WorkDir()
		}
		in := policy.Input{Action: action, SessionID: r.PathValue("id"), File: path.Join(workDir, r.PathValue("path"))}
		if s.allowed(w, r, in) {
			next.ServeHTTP(w, r)
		}
	})
}

// owner is whose sessions the request may use: the caller, whole.
func (s *Server) owner(r *http.Request) caller.ID { return CallerFromContext(r.Context()) }

// withSession serves next with the caller's session {id} in the request's
// context (session.FromContext), held (Session.Use) until next returns.
func (s *Server) withSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(w, r)
		if !ok {
			return
		}
		done, err := sess.Use()
		if err != nil {
			s.writeSessionError(w, r, err)
			return
		}
		defer done()
		next.ServeHTTP(w, r.WithContext(session.NewContext(r.Context(), sess)))
	})
}

// NewFilesHandler is the files API for Options.Files: it serves the
// workspace of the session that the server put in the request's context
// (see withSession), with o.
func NewFilesHandler(o files.Options) *files.Handler {
	return files.NewHandler(func(r *http.Request) (files.Root, error) {
		s, ok := session.FromContext(r.Context())
		if !ok {
			return files.Root{}, errors.New("files: no session in the request's context")
		}
		uid, gid := s.HostIDs()
		return files.Root{Dir: s.Dir(), UID: uid, GID: gid, WorkDir: s.WorkDir(), Size: s.Size(), Closing: s.Closing()}, nil
	}, o)
}

// session finds the caller's session {id}, or answers 404.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	sess, err := s.opts.Sessions.Get(s.owner(r), r.PathValue("id"))
	if err != nil {
		s.writeSessionError(w, r, err)
		return nil, false
	}
	return sess, true
}

func (s *Server) writeSessionError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeRunError(w, r, run.SessionError(err), false)
}

// decodeBody reads a JSON body into v as strictly as /run's: 415 for
// another content type, 400 naming the field for bad input.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if !jsonContent(r) {
		s.reject(w, r, run.RejectMedia, http.StatusUnsupportedMediaType, &api.ErrorResponse{
			Error: "Content-Type must be application/json (charset utf-8, if given)", Code: api.CodeUnsupportedMedia})
		return false
	}
	rc := http.NewResponseController(w)
	limitBody(rc, r, time.Now().Add(s.opts.BodyTimeout))
	defer rc.SetReadDeadline(time.Time{})
	err := api.Decode(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), v)
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		s.reject(w, r, run.RejectTooLarge, http.StatusRequestEntityTooLarge, &api.ErrorResponse{
			Error: err.Error(), Code: api.CodeTooLarge})
		return false
	}
	if s.bodyTimedOut(w, r, err) {
		return false
	}
	e := &api.ErrorResponse{Error: err.Error(), Code: api.CodeBadJSON}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		e.Field = te.Field
	}
	s.reject(w, r, run.RejectBadJSON, http.StatusBadRequest, e)
	return false
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.reject(w, r, run.RejectShutdown, http.StatusServiceUnavailable, &api.ErrorResponse{Error: "the server is shutting down", Code: api.CodeShuttingDown})
		return
	}
	if s.refuseNew(w, r) {
		return
	}
	var req api.SessionRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	ttl, workspace, limits, err := req.Values()
	if err != nil {
		s.audit.Rejected(auditCaller(r), requestIDFromContext(r.Context()), run.RejectInvalid, http.StatusBadRequest, err.Error())
		s.writeSessionError(w, r, err)
		return
	}
	sess, err := s.sessions.Create(r.Context(), &run.SessionRequest{
		Caller: CallerFromContext(r.Context()).String(), RequestID: requestIDFromContext(r.Context()), FrontEnd: "sessions",
		Owner: s.owner(r), TTL: ttl, WorkspaceBytes: workspace, Cwd: req.Cwd, Env: req.Env, Limits: limits, Egress: req.Egress,
	})
	if err != nil {
		s.writeSessionError(w, r, sessionLimitHint(err))
		return
	}
	w.Header().Set("Location", "/sessions/"+sess.ID())
	writeJSON(w, http.StatusCreated, sessionOf(sess.Info()))
}

// sessionLimitHint adds to a limit a caller's session hit how to free a
// place over HTTP.
func sessionLimitHint(err error) error {
	var le *session.LimitError
	if !errors.As(err, &le) || le.Owner.IsZero() {
		return err
	}
	hint := "DELETE /sessions/{id} removes one (GET /sessions lists them; the MCP sessions' workspaces among them go when their MCP session closes)"
	if le.What == "sessions per owner" {
		hint += "; idle sessions expire by themselves"
	}
	return fmt.Errorf("%w. %s", err, hint)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	list := api.SessionList{Sessions: []api.Session{}}
	for _, in := range s.opts.Sessions.List(s.owner(r)) {
		list.Sessions = append(list.Sessions, *sessionOf(in))
	}
	writeJSON(w, http.StatusOK, &list)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	if sess, ok := s.session(w, r); ok {
		writeJSON(w, http.StatusOK, sessionOf(sess.Info()))
	}
}

func (s *Server) patchSession(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var p api.SessionPatch
	if !s.decodeBody(w, r, &p) {
		return
	}
	set := map[string]string{}
	var unset []string
	for k, v := range p.Env {
		if v == nil {
			unset = append(unset, k)
		} else {
			set[k] = *v
		}
	}
	sort.Strings(unset)
	err := s.sessions.SetEnv(r.Context(), &run.SessionEnvRequest{
		Caller: CallerFromContext(r.Context()).String(), RequestID: requestIDFromContext(r.Context()),
		Session: sess, Set: set, Unset: unset,
	})
	if err != nil {
		s.writeSessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOf(sess.Info()))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Sessions.Delete(s.owner(r), r.PathValue("id")); err != nil {
		if !isLostCleanup(err) {
			s.writeSessionError(w, r, err)
			return
		}
		s.log.Warn("removing a session", "request_id", requestIDFromContext(r.Context()), "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

// isLostCleanup reports whether err is a failure of removing a session
// that is gone all the same (logged by the session manager): the caller's
// DELETE did what it asked.
func isLostCleanup(err error) bool {
	return !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrLimit) && !box.IsInvalid(err)
}

// jsonContent reports whether r's body is JSON, in UTF-8 if it says.
func jsonContent(r *http.Request) bool {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if cs, ok := params["charset"]; err == nil && ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return false
	}
	return err == nil && mt == "application/json"
}

// sessionOf is the wire form of a session.
func sessionOf(in session.Info) *api.Session {
	out := &api.Session{
		ID: in.ID, CreatedAt: in.Created, ExpiresAt: in.ExpiresAt, TTLSeconds: int64(in.TTL / time.Second),
		WorkDir: in.WorkDir, Cwd: in.Cwd, Env: map[string]string{}, WorkspaceBytesMax: in.WorkspaceBytes,
		WorkspaceBytesUsed: in.WorkspaceUsed, Jobs: in.Jobs, RunningJobs: in.RunningJobs,
	}
	for _, kv := range in.Env {
		k, v, _ := strings.Cut(kv, "=")
		out.Env[k] = v
	}
	if u := in.Egress; u != nil {
		out.Egress = &api.SessionEgress{BytesIn: u.BytesIn, BytesOut: u.BytesOut, Connections: u.Connections, Denied: u.Denied}
	}
	return out
}
