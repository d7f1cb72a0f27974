package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/run"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP over Streamable HTTP: the SDK's handler plus what it leaves to the
// application (body limits, disconnects, JSON-RPC errors for unknown methods).

// NewMCPHandler serves the MCP server of [NewMCPServer] over Streamable
// HTTP. It adds what the SDK leaves to the application: an Origin check
// against DNS rebinding (see [MCPOptions.AllowedOrigins]), a JSON-RPC error
// for unknown methods, and killing a call's sandbox when the client that
// made it disconnects. Authentication is the caller's: mount it behind the
// same bearer-token check as the rest of the API. An MCP session is its
// opener's ([CallerFromContext] of the request that opened it): a request
// of anyone else that names it (GET, POST or DELETE) is answered 404.
func NewMCPHandler(r run.Runner, opts MCPOptions) http.Handler {
	o := opts.withDefaults()
	h := &mcpHandler{
		origins:    newOriginPolicy(o.AllowedOrigins),
		posts:      map[string]context.Context{},
		owners:     map[string]caller.ID{},
		calls:      map[callKey]*mutableWriter{},
		maxTimeout: o.MaxTimeout,
	}
	srv, tools := newMCPServer(r, o, h.postContext)
	h.srv, h.tools = srv, tools
	if tools.sess != nil {
		tools.sess.tracked = true
	}
	h.sdk = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:         o.Logger,
		SessionTimeout: max(o.SessionTimeout, 0),
	})
	return h
}

// postIDHeader carries, from mcpHandler to the tool handler, which HTTP
// request a call arrived on: the SDK hands tool handlers the request's
// headers but not its context. Any client-supplied value is removed first.
const postIDHeader = "Jaild-Internal-Post-Id"

type mcpHandler struct {
	sdk        *mcp.StreamableHTTPHandler
	srv        *mcp.Server
	tools      *mcpTools
	origins    originPolicy
	maxTimeout time.Duration

	mu    sync.Mutex
	posts map[string]context.Context
	// owners are who opened each MCP session, by Mcp-Session-Id.
	owners map[string]caller.ID
	// calls are the POSTs of single calls in a session, by the call: a
	// notifications/cancelled for one mutes and ends its POST.
	calls map[callKey]*mutableWriter
}

// callKey names a call: request ids are unique within a session.
type callKey struct {
	session string
	id      jsonrpc.ID
}

// Close closes the MCP sessions still open, which removes their jaild
// sessions, and waits until that is done. The daemon calls it once the
// server has stopped.
func (h *mcpHandler) Close() error {
	if h.tools.sess == nil {
		return nil
	}
	for ss := range h.srv.Sessions() {
		_ = ss.Close()
	}
	h.tools.sess.wait()
	return nil
}

func (h *mcpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); !h.origins.allowed(origin) {
		// A browser page on another site (possibly reaching a loopback
		// port through DNS rebinding) must not drive a root daemon.
		http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
		return
	}
	r.Header.Del(postIDHeader)
	who := CallerFromContext(r.Context())
	if id := r.Header.Get(mcpSessionHeader); id != "" {
		if !h.ownedBy(id, who) {
			// The session id is not a credential: only who opened the
			// MCP session may use or close it (and so its workspace).
			// Another caller is told what a caller of an unknown id
			// is, as the sessions API does.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if h.tools.sess != nil {
			// The client is there while a request of its MCP session
			// is open: that holds the session's workspace.
			defer h.tools.sess.connected(id)()
		}
	} else {
		w = &sessionOpener{ResponseWriter: w, h: h, who: who}
	}
	rc := http.NewResponseController(w)
	switch r.Method {
	case http.MethodPost:
		h.servePost(w, r, rc)
		return
	case http.MethodGet:
		// The standalone SSE stream lives as long as the client wants.
		_ = rc.SetWriteDeadline(time.Time{})
		_ = rc.SetReadDeadline(time.Time{})
	}
	h.sdk.ServeHTTP(w, r)
}

// servePost serves a POST whose origin and session were checked: its body
// read whole and bounded, its context known to the tool handlers by
// postIDHeader, and a call in it ended by a notifications/cancelled for it.
func (h *mcpHandler) servePost(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) {
	body, status := readMCPBody(rc, r)
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	// From here on the call may stream for up to the maximum
	// timeout. A read deadline left in place would, through
	// net/http's background read, cancel the request and so kill
	// the sandbox; the write deadline only bounds a client that
	// stops reading.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(h.maxTimeout + 2*time.Minute))
	r.Body = io.NopCloser(bytes.NewReader(body))
	msg, _ := jsonrpc.DecodeMessage(body)
	req, _ := msg.(*jsonrpc.Request)
	sessionID := r.Header.Get(mcpSessionHeader)
	if req != nil && sessionID == "" && needsSession(r, req) {
		// The specification's answer to a request of a session
		// that names none; the SDK would start a session for it
		// and answer "invalid during session initialization".
		writeJSONRPCError(w, http.StatusBadRequest, req.ID, jsonrpc.CodeInvalidRequest,
			"Bad Request: no "+mcpSessionHeader+" header: "+req.Method+" belongs to a session; send initialize first")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	r = r.WithContext(ctx)
	id, done := h.addPost(ctx)
	defer done()
	if req != nil && sessionID != "" {
		switch {
		case req.IsCall():
			mw := &mutableWriter{ResponseWriter: w, cancel: cancel}
			w = mw
			defer h.addCall(callKey{sessionID, req.ID}, mw)()
		case req.Method == "notifications/cancelled":
			// Before the SDK sees it and ends the call, whose
			// response then finds its POST muted.
			h.mute(sessionID, req.Params)
		}
	}
	r.Header.Set(postIDHeader, id)
	if jw := newJSONRPCErrorWriter(w, body); jw != nil {
		w = jw
		defer jw.finish()
	}
	h.sdk.ServeHTTP(w, r)
}

// addPost names ctx, a POST's, for postContext until done is called.
func (h *mcpHandler) addPost(ctx context.Context) (id string, done func()) {
	id = rand.Text()
	h.mu.Lock()
	h.posts[id] = ctx
	h.mu.Unlock()
	return id, func() {
		h.mu.Lock()
		delete(h.posts, id)
		h.mu.Unlock()
	}
}

// addCall makes mw the writer that mute finds for the call key, until
// done is called.
func (h *mcpHandler) addCall(key callKey, mw *mutableWriter) (done func()) {
	h.mu.Lock()
	h.calls[key] = mw
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if h.calls[key] == mw {
			delete(h.calls, key)
		}
		h.mu.Unlock()
	}
}

// mcpSessionHeader is the Streamable HTTP transport's session header.
const mcpSessionHeader = "Mcp-Session-Id"

// needsSession reports whether req, arriving without a session id, is one
// of a session's messages: a method of the protocol other than initialize
// (and other than the 2026 protocol's sessionless requests, which the SDK
// answers itself). An unknown method is not: it gets "method not found",
// the answer clients probing for newer methods fall back on.
func needsSession(r *http.Request, req *jsonrpc.Request) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= "2026-07-28" {
		return false
	}
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &p) == nil && p.Meta[mcp.MetaKeyProtocolVersion] != nil {
		return false
	}
	if req.Method == "ping" {
		return true
	}
	for _, prefix := range []string{"tools/", "resources/", "prompts/", "completion/", "logging/", "notifications/"} {
		if strings.HasPrefix(req.Method, prefix) {
			return true
		}
	}
	return false
}

// mute silences and ends the POST of the call that a notifications/cancelled
// with params names: the MCP specification asks that a cancelled request get
// no response.
func (h *mcpHandler) mute(sessionID string, params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	h.mu.Lock()
	mw := h.calls[callKey{sessionID, id}]
	h.mu.Unlock()
	if mw != nil {
		mw.mute()
	}
}

// mutableWriter passes writes on until it is muted; muting also cancels the
// request, which ends the SDK's wait for the call's response.
type mutableWriter struct {
	http.ResponseWriter
	cancel context.CancelFunc

	mu    sync.Mutex
	muted bool
}

var errMuted = errors.New("the call was cancelled: its response is not sent")

func (w *mutableWriter) mute() {
	w.mu.Lock()
	w.muted = true
	w.mu.Unlock()
	w.cancel()
}

func (w *mutableWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.muted {
		return 0, errMuted
	}
	return w.ResponseWriter.Write(b)
}

// ownedBy reports whether who opened the MCP session id. An id the handler
// did not see opened is nobody's.
func (h *mcpHandler) ownedBy(id string, who caller.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	owner, ok := h.owners[id]
	return ok && owner == who
}

// opened records that who opened the MCP session id, and forgets the
// sessions that have closed since (their ids are then nobody's).
func (h *mcpHandler) opened(id string, who caller.ID) {
	live := map[string]bool{}
	for ss := range h.srv.Sessions() {
		live[ss.ID()] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for old := range h.owners {
		if !live[old] {
			delete(h.owners, old)
		}
	}
	h.owners[id] = who
}

// sessionOpener records the owner of the MCP session an answer opens,
// before its header goes out: the client cannot use the id any sooner.
type sessionOpener struct {
	http.ResponseWriter
	h    *mcpHandler
	who  caller.ID
	done bool
}

func (w *sessionOpener) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if id := w.Header().Get(mcpSessionHeader); id != "" {
			w.h.opened(id, w.who)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionOpener) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *mutableWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.muted {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *mutableWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSONRPCError answers with an HTTP status and a JSON-RPC error.
func writeJSONRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, code int64, msg string) {
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func (w *sessionOpener) Flush() {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *sessionOpener) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpBodyTimeout bounds how long a client may take to send a request body
// (against slow-loris clients).
const mcpBodyTimeout = 30 * time.Second

// readMCPBody reads the request body within mcpBodyTimeout and the SDK's
// size limit, or returns the HTTP status to fail with.
func readMCPBody(rc *http.ResponseController, r *http.Request) ([]byte, int) {
	if r.Body == nil {
		return nil, 0
	}
	limitBody(rc, r, time.Now().Add(mcpBodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout
	case err != nil:
		return nil, http.StatusBadRequest
	case len(body) > mcp.DefaultMaxRequestBodyBytes:
		return nil, http.StatusRequestEntityTooLarge
	}
	return body, 0
}

func (h *mcpHandler) postContext(req *mcp.CallToolRequest) (context.Context, bool) {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil, false
	}
	id := req.Extra.Header.Get(postIDHeader)
	if id == "" {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx, ok := h.posts[id]; ok {
		return ctx, true
	}
	// The request ended before its call started, which only a client
	// that hung up makes happen: nobody will read this call's result.
	return endedContext, true
}

// endedContext is an already cancelled context.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// jsonrpcErrorWriter turns the SDK's plain-text "400 Bad Request" for a
// call to an unknown method into a JSON-RPC error response. Clients probe
// servers with methods of newer protocol versions and fall back only on a
// JSON-RPC error; over stdio the SDK already answers that way.
type jsonrpcErrorWriter struct {
	http.ResponseWriter
	id        jsonrpc.ID
	intercept bool
	body      []byte
	wrote     bool
}

// newJSONRPCErrorWriter wraps w if body is a single call (whose errors may
// need rewriting), and returns nil otherwise.
func newJSONRPCErrorWriter(w http.ResponseWriter, body []byte) *jsonrpcErrorWriter {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil
	}
	call, ok := msg.(*jsonrpc.Request)
	if !ok || !call.IsCall() {
		return nil
	}
	return &jsonrpcErrorWriter{ResponseWriter: w, id: call.ID}
}

func (w *jsonrpcErrorWriter) WriteHeader(code int) {
	if !w.wrote && code == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.intercept = true
	} else {
		w.ResponseWriter.WriteHeader(code)
	}
	w.wrote = true
}

func (w *jsonrpcErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.intercept {
		if len(w.body) < 4096 {
			w.body = append(w.body, b[:min(len(b), 4096-len(w.body))]...)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush and Unwrap keep SSE streaming and deadline control working through
// the wrapper.
func (w *jsonrpcErrorWriter) Flush() {
	if !w.intercept {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *jsonrpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sdkNotHandled and sdkInvalidRequest prefix the SDK's messages for a call
// to an unknown method and for a malformed call (jsonrpc2.ErrNotHandled,
// jsonrpc2.ErrInvalidRequest).
const (
	sdkNotHandled     = "JSON RPC not handled"
	sdkInvalidRequest = "invalid request"
)

func (w *jsonrpcErrorWriter) finish() {
	if !w.intercept {
		return
	}
	msg := strings.TrimSpace(string(w.body))
	var code int64
	switch {
	case strings.HasPrefix(msg, sdkNotHandled):
		code = jsonrpc.CodeMethodNotFound
		msg = "Method not found: " + strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(msg, sdkNotHandled), ":"))
	case strings.HasPrefix(msg, sdkInvalidRequest):
		code = jsonrpc.CodeInvalidRequest
	default:
		// A transport-level complaint (headers, session): leave it as
		// the SDK wrote it.
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
		_, _ = w.ResponseWriter.Write(w.body)
		return
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: w.id, Error: &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		w.ResponseWriter.WriteHeader(http.StatusBadRequest)
		_, _ = w.ResponseWriter.Write(w.body)
		return
	}
	h := w.ResponseWriter.Header()
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.ResponseWriter.WriteHeader(http.StatusOK)
	_, _ = w.ResponseWriter.Write(data)
}
