package server

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

//go:embed openapi.yaml
var openAPI []byte

func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(openAPI)
}

// withRequestID gives every request an id, in its context (for logs and the
// audit record) and in the X-Request-Id answer header (for the caller).
func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := rand.Text()
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(withRequestID(r.Context(), id)))
	})
}

// handleHealth answers GET /healthz: whether sandboxes can run here.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) { s.serveHealth(w, r, nil) }

// serveHealth answers /healthz, or /readyz with load.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request, load *float64) {
	h := api.Health{Status: "ok", Jail: "ok", Load: load}
	status := http.StatusOK
	if err := s.health.get(r.Context()); err != nil {
		h.Status, h.Jail, status = "unhealthy", err.Error(), http.StatusServiceUnavailable
	}
	if s.opts.Policy != nil {
		var ok bool
		if h.Policy, ok = s.opts.Policy(); !ok {
			h.Status, status = "unhealthy", http.StatusServiceUnavailable
		}
	}
	if s.draining.Load() {
		h.Status, status = "draining", http.StatusServiceUnavailable
	}
	writeJSON(w, status, &h)
}

// handleRun answers POST /run: the whole result once the command ended.
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	req, background, ok := s.readRequest(w, r, "run")
	if !ok {
		return
	}
	if background {
		s.startJob(w, r, req)
		return
	}
	// The result's memory stays reserved until it is written.
	var out run.OutputHold
	defer out.Release()
	req.KeepOutput = &out
	res, err := s.opts.Runner.Run(r.Context(), req)
	if err == nil && res == nil {
		err = errNoResult
	}
	if err != nil {
		s.writeRunError(w, r, err, false)
		return
	}
	s.setWriteDeadline(w)
	writeResult(w, res)
}

// handleRaw answers POST /raw with an NDJSON stream of events while the
// command runs. Until the run is admitted nothing is sent, so that refusals
// (invalid, busy) still get their HTTP status; from then on failures are
// error events. A client that goes away, or stops reading for WriteTimeout,
// cancels the run.
func (s *Server) handleRaw(w http.ResponseWriter, r *http.Request) {
	req, _, ok := s.readRequest(w, r, "raw") // background: refused for raw
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &rawStream{
		w:            w,
		rc:           http.NewResponseController(w),
		writeTimeout: s.opts.WriteTimeout,
		requestID:    requestIDFromContext(ctx),
		fail:         cancel,
	}
	req.Spec.Stdout = rawWriter{st, api.EventStdout}
	req.Spec.Stderr = rawWriter{st, api.EventStderr}
	req.OnAdmit = st.start // the stream starts once the run is admitted
	var out run.OutputHold
	defer out.Release()
	req.KeepOutput = &out

	res, err := s.opts.Runner.Run(ctx, req)
	if err == nil && res == nil {
		err = errNoResult
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	// Output the jail may still be writing after Run returned (it should
	// not) is dropped rather than sent after the final event.
	defer func() { st.done = true }()
	if err != nil && !st.started {
		s.writeRunError(w, r, err, true)
		return
	}
	if serr := st.startLocked(); serr != nil {
		return
	}
	if err != nil {
		status, e := s.classify(err, st.requestID)
		if status == http.StatusInternalServerError {
			s.log.Error("run failed", "request_id", st.requestID, "err", err)
		}
		st.emitLocked(&api.Event{Event: api.EventError, Message: e.Text(), Code: e.Code, Denial: e.Denial})
		return
	}
	v := api.VerdictOf(res)
	// The stream carried every byte the command wrote: nothing was cut
	// for this client, whatever the jail kept for itself.
	v.StdoutTruncated, v.StderrTruncated = false, false
	code := res.ExitCode
	st.emitLocked(&api.Event{Event: api.EventExit, ExitCode: &code, Verdict: &v})
}

// rawStream writes /raw events. The jail's stdout and stderr copiers write
// from their own goroutines, hence the mutex; each event is flushed at once
// so that the client sees output as it is produced.
type rawStream struct {
	mu           sync.Mutex
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	requestID    string
	fail         func() // cancels the run when the client is gone
	started      bool
	done         bool
	err          error // first write error; the stream is dead after it
	buf          bytes.Buffer
}

var (
	errStreamDone = errors.New("server: event after the end of the stream")
	errNoResult   = errors.New("server: the runner returned neither a result nor an error")
)

func (st *rawStream) start() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.startLocked()
}

func (st *rawStream) startLocked() error {
	if st.started {
		return st.err
	}
	st.started = true
	h := st.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	st.w.WriteHeader(http.StatusOK)
	return st.emitLocked(&api.Event{Event: api.EventStart, RequestID: st.requestID})
}

func (st *rawStream) emitLocked(ev *api.Event) error {
	if st.err != nil {
		return st.err
	}
	if st.done {
		return errStreamDone
	}
	st.buf.Reset()
	if err := json.NewEncoder(&st.buf).Encode(ev); err != nil {
		return err
	}
	// A deadline per write, not per response: a run may stream for as long
	// as its timeout allows, but a client that stops reading must not
	// hold the sandbox (whose pipe then fills) until then.
	if err := st.rc.SetWriteDeadline(time.Now().Add(st.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		st.err = err
	}
	if st.err == nil {
		if _, err := st.w.Write(st.buf.Bytes()); err != nil {
			st.err = err
		} else if err := st.rc.Flush(); err != nil {
			st.err = err
		}
	}
	if st.err != nil {
		st.fail()
	}
	return st.err
}

// rawWriter is the io.Writer handed to the jail as Stdout or Stderr.
type rawWriter struct {
	st   *rawStream
	kind string
}

func (sw rawWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		// An event without data_b64 is none of the convention's shapes.
		return 0, nil
	}
	sw.st.mu.Lock()
	defer sw.st.mu.Unlock()
	if err := sw.st.startLocked(); err != nil {
		return 0, err
	}
	if err := sw.st.emitLocked(&api.Event{Event: sw.kind, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readRequest reads and checks a request body and converts it into the
// chain's request for frontEnd, and whether it asks to start a background
// job rather than run (run_in_background); or answers with the error and
// returns ok false.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, frontEnd string) (_ run.Request, background, ok bool) {
	if s.draining.Load() {
		s.reject(w, r, run.RejectShutdown, http.StatusServiceUnavailable, &api.ErrorResponse{Error: "the server is shutting down", Code: api.CodeShuttingDown})
		return run.Request{}, false, false
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if cs, ok := params["charset"]; err == nil && ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		err = errors.New("charset " + cs)
	}
	if err != nil || mt != "application/json" {
		s.reject(w, r, run.RejectMedia, http.StatusUnsupportedMediaType, &api.ErrorResponse{
			Error: "Content-Type must be application/json (charset utf-8, if given)", Code: api.CodeUnsupportedMedia})
		return run.Request{}, false, false
	}
	rc := http.NewResponseController(w)
	limitBody(rc, r, time.Now().Add(s.opts.BodyTimeout))
	req, err := api.DecodeRequest(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			s.reject(w, r, run.RejectTooLarge, http.StatusRequestEntityTooLarge, &api.ErrorResponse{
				Error: "request body larger than " + strconv.FormatInt(tooBig.Limit, 10) + " bytes", Code: api.CodeTooLarge})
		case s.bodyTimedOut(w, r, err):
		default:
			s.reject(w, r, run.RejectBadJSON, http.StatusBadRequest, &api.ErrorResponse{Error: err.Error(), Code: api.CodeBadJSON})
		}
		return run.Request{}, false, false
	}
	if id := r.PathValue("id"); id != "" {
		// POST /sessions/{id}/run and /raw: the path names the session.
		if req.SessionID != "" && req.SessionID != id {
			err := &box.InvalidError{Field: "session_id", Reason: "differs from the session in the path"}
			s.audit.Rejected(CallerFromContext(r.Context()).String(), requestIDFromContext(r.Context()), run.RejectInvalid, http.StatusBadRequest, err.Error())
			s.writeRunError(w, r, err, frontEnd == "raw")
			return run.Request{}, false, false
		}
		req.SessionID = id
	}
	// The body was read to its end. Lift the deadline again: the server
	// keeps reading the connection in the background to notice a client
	// that goes away, and a deadline hitting that read would cancel the
	// run as if the client had.
	rc.SetReadDeadline(time.Time{})
	limits, cmd, err := req.Spec()
	if err != nil {
		s.audit.Rejected(auditCaller(r), requestIDFromContext(r.Context()), run.RejectInvalid, http.StatusBadRequest, err.Error())
		s.writeRunError(w, r, err, frontEnd == "raw")
		return run.Request{}, false, false
	}
	if req.RunInBackground && frontEnd != "run" {
		err := &box.InvalidError{Field: "run_in_background", Reason: "only POST /run starts background jobs"}
		s.audit.Rejected(auditCaller(r), requestIDFromContext(r.Context()), run.RejectInvalid, http.StatusBadRequest, err.Error())
		s.writeRunError(w, r, err, true)
		return run.Request{}, false, false
	}
	if req.SessionID == "" && s.refuseNew(w, r) {
		return run.Request{}, false, false
	}
	ctx := r.Context()
	tf, tn, tu := req.TimeoutAsked()
	spec := &jail.Spec{Limits: limits, Command: cmd}
	return run.Request{Spec: spec, Shell: req.Command, Caller: CallerFromContext(ctx).String(),
		TimeoutField: tf, TimeoutValue: tn, TimeoutUnit: tu,
		RequestID: requestIDFromContext(ctx), FrontEnd: frontEnd, Egress: req.Egress,
		SessionID: req.SessionID, Owner: s.owner(r)}, req.RunInBackground, true
}

// bodyTimedOut answers 408 and reports true if err is a request body's
// read that timed out: behind its pace (the error says by how much), taken
// for another peer's connection, or past BodyTimeout.
func (s *Server) bodyTimedOut(w http.ResponseWriter, r *http.Request, err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	msg := "request body not received within " + s.opts.BodyTimeout.String()
	var slow *slowBodyError
	if errors.As(err, &slow) {
		msg = slow.Error()
	}
	s.reject(w, r, run.RejectBodyTimeout, http.StatusRequestTimeout, &api.ErrorResponse{Error: msg, Code: api.CodeBodyTimeout})
	return true
}

// auditCaller names the caller of r in the audit log: the authenticated
// caller or, for a request refused before authentication, the peer with
// its port (which connection it was).
func auditCaller(r *http.Request) string {
	if id := CallerFromContext(r.Context()); !id.IsZero() {
		return id.String()
	}
	return peerFromContext(r.Context(), r).addr
}

// reject answers a request refused before it became a run, counts it and
// audits it. The connection is closed after the answer: part of the body
// may be unread (net/http would try to drain it to reuse the connection),
// and a client that sends what the daemon refuses should not keep a
// connection it holds idle.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, reason string, status int, e *api.ErrorResponse) {
	s.metrics.Rejected(reason)
	s.audit.Rejected(auditCaller(r), requestIDFromContext(r.Context()), reason, status, e.Error)
	w.Header().Set("Connection", "close")
	writeError(w, status, e)
}

// writeRunError answers a failed run (or a spec refused before it); raw
// answers /raw before its stream started (see rawRefusal).
func (s *Server) writeRunError(w http.ResponseWriter, r *http.Request, err error, raw bool) {
	id := requestIDFromContext(r.Context())
	status, e := s.classify(err, id)
	switch status {
	case http.StatusTooManyRequests:
		wait := s.opts.RetryAfter
		var be *box.BusyError
		if errors.As(err, &be) {
			wait = be.RetryAfter
		}
		setRetryAfter(w, wait)
	case http.StatusServiceUnavailable:
		switch {
		case errors.Is(err, box.ErrUnavailable):
			setRetryAfter(w, time.Second) // a worker restarts within a second
		case e.Code == api.CodeCapacity:
			setRetryAfter(w, s.opts.RetryAfter)
		}
	case http.StatusBadRequest:
		s.metrics.Rejected(run.RejectInvalid)
		w.Header().Set("Connection", "close")
	}
	if status == http.StatusInternalServerError {
		s.log.Error("run failed", "request_id", id, "err", err)
	}
	// Answer even if the request's context ended: that may be the
	// daemon's shutdown rather than the client leaving, and writing to a
	// client that left merely fails.
	s.setWriteDeadline(w)
	if raw {
		e.Message = e.Text()
		writeJSON(w, status, &rawRefusal{Event: api.EventError, ErrorResponse: e})
		return
	}
	writeError(w, status, e)
}

// setRetryAfter sets Retry-After to wait, in whole seconds rounded up.
func setRetryAfter(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
}

// rawRefusal is /raw's answer to a run refused before its stream started
// (invalid, denied by the policy, busy): the error answer /run would give,
// with its HTTP status, which is also one line of an NDJSON stream ending
// in an error event, {"event":"error","message":...}. A client that reads
// the status gets the usual answer, and one written for the policy-runner
// convention's /raw, which reads events, gets the error event.
type rawRefusal struct {
	Event string `json:"event"`
	*api.ErrorResponse
}

// classify maps a run error to its HTTP status and answer. The detail of a
// 500 (host paths, kernel errors) goes to the log, not to the caller, who
// gets the request id to quote.
func (s *Server) classify(err error, requestID string) (int, *api.ErrorResponse) {
	o := api.ErrorOutcome(err)
	e := api.NewErrorResponse(o.Code, err.Error())
	var ie *box.InvalidError
	if errors.As(err, &ie) {
		e.Field = ie.Field
	}
	var de *api.DeniedError
	if errors.As(err, &de) {
		e.Denial = de.Denial()
	}
	if o.Code == api.CodeCanceled && s.draining.Load() {
		e.Code, e.Error = api.CodeShuttingDown, "the server is shutting down: run killed"
	}
	if o.Status == http.StatusInternalServerError {
		e.Error = internalMessages[o.Code] + "; the daemon's log has the detail under request_id " + requestID
	}
	return o.Status, e
}

// internalMessages are what a caller is told of a 500, by code.
var internalMessages = map[string]string{
	api.CodeNotRoot:     "the daemon cannot build sandboxes: it does not run as root",
	api.CodeUnsupported: "this host lacks what sandboxes need",
	api.CodeRootfs:      "the sandboxes' root filesystem is unusable",
	api.CodeInternal:    "internal error",
}

func (s *Server) setWriteDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
}

func writeError(w http.ResponseWriter, status int, e *api.ErrorResponse) {
	writeJSON(w, status, e)
}

// writeJSON sends v with a Content-Length, so that a client can tell a
// complete answer from one cut off.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":"encode answer","code":"internal"}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}
