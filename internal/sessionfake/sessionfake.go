package sessionfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/session/files"
)

// Server is the fake daemon.
type Server struct {
	*httptest.Server
	// Token, if set, is the bearer token every request must carry.
	Token string
	// WorkDir, if set, is the sandboxes' working directory its sessions
	// report (api.Session.WorkDir) and start in; empty: /work, unreported,
	// as an older daemon.
	WorkDir string

	t   testing.TB
	dir string

	mu       sync.Mutex
	sessions map[string]*session
	next     int
	runs     []api.Request
}

type session struct {
	api.Session
	dir  string
	jobs map[string]*job
	// order keeps the jobs as they were added.
	order []string
}

type job struct {
	api.Job
	stdout, stderr string
}

// New starts a fake daemon, closed at the end of the test.
func New(t testing.TB) *Server {
	s := &Server{t: t, dir: t.TempDir(), sessions: map[string]*session{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sessions", s.create)
	mux.HandleFunc("GET /sessions", s.list)
	mux.HandleFunc("GET /sessions/{id}", s.get)
	mux.HandleFunc("PATCH /sessions/{id}", s.patch)
	mux.HandleFunc("DELETE /sessions/{id}", s.delete)
	mux.HandleFunc("GET /sessions/{id}/jobs", s.jobs)
	mux.HandleFunc("GET /sessions/{id}/jobs/{job}", s.job)
	mux.HandleFunc("DELETE /sessions/{id}/jobs/{job}", s.kill)
	fh := files.NewHandler(s.root, files.Options{LookupError: func(w http.ResponseWriter, _ *http.Request, err error) {
		writeError(w, http.StatusNotFound, err.Error(), "no_session")
	}})
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		mux.Handle(m+" /sessions/{id}/files/{path...}", fh)
	}
	mux.HandleFunc("POST /raw", s.raw)
	mux.HandleFunc("POST /run", s.run)
	s.Server = httptest.NewServer(s.auth(mux))
	t.Cleanup(s.Close)
	return s
}

// Dir is the host directory of a session's files.
func (s *Server) Dir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[id]; ss != nil {
		return ss.dir
	}
	return ""
}

// Runs are the /run and /raw requests received so far.
func (s *Server) Runs() []api.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.Request(nil), s.runs...)
}

// AddJob adds a job to a session, with all of its output. A job added as
// "running" ends (exit code 3) once all of its output was read, so that a
// client following it sees it running first.
func (s *Server) AddJob(id string, j api.Job, stdout, stderr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		s.t.Fatalf("sessionfake: AddJob on unknown session %s", id)
	}
	ss.jobs[j.JobID] = &job{Job: j, stdout: stdout, stderr: stderr}
	ss.order = append(ss.order, j.JobID)
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
			writeError(w, http.StatusUnauthorized, "missing or wrong token", api.CodeUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req api.SessionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), api.CodeBadJSON)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := fmt.Sprintf("s%d", s.next)
	dir := filepath.Join(s.dir, id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error(), api.CodeInternal)
		return
	}
	ttl := int64(1800)
	if req.TTLSeconds != nil {
		ttl = *req.TTLSeconds
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/work"
		if s.WorkDir != "" {
			cwd = s.WorkDir
		}
	}
	env := req.Env
	if env == nil {
		env = map[string]string{}
	}
	now := time.Now().UTC()
	ss := &session{Session: api.Session{ID: id, CreatedAt: now, ExpiresAt: now.Add(time.Duration(ttl) * time.Second),
		TTLSeconds: ttl, WorkDir: s.WorkDir, Cwd: cwd, Env: env, WorkspaceBytesMax: 1 << 30}, dir: dir, jobs: map[string]*job{}}
	s.sessions[id] = ss
	writeJSON(w, http.StatusCreated, ss.Session)
}

func (s *Server) find(w http.ResponseWriter, r *http.Request) *session {
	ss := s.sessions[r.PathValue("id")]
	if ss == nil {
		writeError(w, http.StatusNotFound, "no such session", "no_session")
	}
	return ss
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := api.SessionList{Sessions: []api.Session{}}
	for i := 1; i <= s.next; i++ {
		if ss := s.sessions[fmt.Sprintf("s%d", i)]; ss != nil {
			l.Sessions = append(l.Sessions, ss.Session)
		}
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.find(w, r); ss != nil {
		ss.Jobs = len(ss.jobs)
		writeJSON(w, http.StatusOK, ss.Session)
	}
}

func (s *Server) patch(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.find(w, r)
	if ss == nil {
		return
	}
	var p api.SessionPatch
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), api.CodeBadJSON)
		return
	}
	for k, v := range p.Env {
		if v == nil {
			delete(ss.Env, k)
		} else {
			ss.Env[k] = *v
		}
	}
	writeJSON(w, http.StatusOK, ss.Session)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.find(w, r); ss != nil {
		delete(s.sessions, ss.ID)
		os.RemoveAll(ss.dir)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.find(w, r)
	if ss == nil {
		return
	}
	l := api.JobList{Jobs: []api.Job{}}
	for _, id := range ss.order {
		l.Jobs = append(l.Jobs, ss.jobs[id].Job)
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) findJob(w http.ResponseWriter, r *http.Request) *job {
	ss := s.find(w, r)
	if ss == nil {
		return nil
	}
	j := ss.jobs[r.PathValue("job")]
	if j == nil {
		writeError(w, http.StatusNotFound, "no such job", "no_session")
	}
	return j
}

// job answers at most 4 bytes of each stream from the offsets asked, so
// that a client must follow the offsets; a running job ends once all of
// its output was read.
func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.findJob(w, r)
	if j == nil {
		return
	}
	q := r.URL.Query()
	out := j.Job
	out.Stdout, out.StdoutOffset = chunk(j.stdout, q.Get("stdout_offset"))
	out.Stderr, out.StderrOffset = chunk(j.stderr, q.Get("stderr_offset"))
	if out.StdoutOffset == int64(len(j.stdout)) && out.StderrOffset == int64(len(j.stderr)) && j.State == "running" {
		// Everything was read: the job ends now.
		j.State = "exited"
		now := time.Now().UTC()
		j.EndedAt = &now
		code := 3
		j.ExitCode = &code
		j.Verdict = &api.Verdict{ID: "sb-" + j.JobID}
	}
	writeJSON(w, http.StatusOK, out)
}

func chunk(s, offset string) (string, int64) {
	off, _ := strconv.ParseInt(offset, 10, 64)
	off = min(max(off, 0), int64(len(s)))
	end := min(off+4, int64(len(s)))
	return s[off:end], end
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.findJob(w, r)
	if j == nil {
		return
	}
	j.State = "exited"
	j.Verdict = &api.Verdict{ID: "sb-" + j.JobID, Canceled: true}
	writeJSON(w, http.StatusOK, j.Job)
}

// root is the files handler's lookup.
func (s *Server) root(r *http.Request) (files.Root, error) {
	dir := s.Dir(r.PathValue("id"))
	if dir == "" {
		return files.Root{}, fmt.Errorf("no such session")
	}
	root, err := files.RootOf(dir)
	root.WorkDir = s.WorkDir
	return root, err
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) *api.Request {
	var req api.Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), api.CodeBadJSON)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, req)
	if req.SessionID != "" && s.sessions[req.SessionID] == nil {
		writeError(w, http.StatusNotFound, "no such session", "no_session")
		return nil
	}
	return &req
}

// raw answers every command with "ran in SESSION" on stdout and exit 0.
func (s *Server) raw(w http.ResponseWriter, r *http.Request) {
	req := s.record(w, r)
	if req == nil {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	zero := 0
	_ = enc.Encode(api.Event{Event: api.EventStart, RequestID: "r1"})
	_ = enc.Encode(api.Event{Event: api.EventStdout, Data: []byte("ran in " + req.SessionID + "\n")})
	_ = enc.Encode(api.Event{Event: api.EventExit, ExitCode: &zero, Verdict: &api.Verdict{ID: "sb"}})
}

// run answers a background run with a JobAccepted, anything else with a
// Response like raw's.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	req := s.record(w, r)
	if req == nil {
		return
	}
	if req.RunInBackground {
		writeJSON(w, http.StatusAccepted, api.JobAccepted{JobID: "j1", SessionID: req.SessionID, Status: "/sessions/" + req.SessionID + "/jobs/j1"})
		return
	}
	writeJSON(w, http.StatusOK, api.Response{Stdout: "ran in " + req.SessionID + "\n", Verdict: api.Verdict{ID: "sb"}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg, code string) {
	writeJSON(w, status, api.ErrorResponse{Error: msg, Code: code})
}
