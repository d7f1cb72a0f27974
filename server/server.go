package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/route"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// Defaults of Options; every zero field of Options means the default here.
const (
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxConns          = 256
	DefaultMaxConnsPerPeer   = 64
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultMinBodyRate       = 1024
	DefaultBodyRateGrace     = 5 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownGrace     = 10 * time.Second
	DefaultKillWait          = 15 * time.Second
	DefaultRetryAfter        = time.Second
	DefaultHealthTTL         = 10 * time.Second
	maxHeaderBytes           = 64 << 10
)

// Options configure a Server. Every duration and size left zero gets its
// Default*; Runner is required.
//
// The server holds at most MaxConns connections, each reading at most
// MaxBodyBytes of request, so its memory is bounded by about
// MaxConns*2*MaxBodyBytes plus what the runner keeps per admitted run.
type Options struct {
	// Runner runs the commands; normally the chain built by [run.Chain], so
	// that maxima, admission control, audit and metrics apply. Required.
	Runner run.Runner
	// Tokens, if non-nil, are required as "Authorization: Bearer TOKEN"
	// on every endpoint but /healthz and /openapi.yaml. Nil means no auth:
	// the caller must make sure only trusted peers can connect (loopback,
	// or a unix socket with a restrictive mode).
	Tokens *Tokens
	// Metrics is served at /metrics; nil means a fresh set that only
	// counts rejected requests. Pass the same Metrics as to [run.Chain].
	Metrics *run.Metrics
	// Health reports whether sandboxes work on this host, for /healthz;
	// nil means they are assumed to. Its result is cached for HealthTTL,
	// so that an unauthenticated endpoint cannot be made to build
	// sandboxes at will.
	Health    func(ctx context.Context) error
	HealthTTL time.Duration
	// Policy, if non-nil, reports the operator's policy for /healthz:
	// its state ("ok rev ..." or "deny-all: ...") and whether runs can
	// be allowed at all (false in deny-all, which makes /healthz 503).
	Policy func() (state string, ok bool)
	// PolicyEngine, if non-nil, decides the session requests that are
	// not runs (policy.ActionQuery): POST /sessions, PATCH
	// /sessions/{id}, and the files API; a denial is 403 policy_denied.
	// Pass the chain's (run.ChainOptions.Policy), which decides runs.
	PolicyEngine *policy.Engine

	// Sessions, if non-nil, serves the session endpoints (/sessions...,
	// see sessions.go) and runs with session_id; pass the same Manager
	// as to the chain (run.ChainOptions.Sessions). SessionMax are the
	// chain's maxima (run.ChainOptions.Max), which a session's limits
	// must be within and whose defaults fill its unset ones.
	// SessionEgress is the daemon's egress configuration, for the
	// sessions' egress (decided at their creation): the same as the
	// chain's (run.ChainOptions.Egress). A run.Sessions made of them,
	// with Audit, Metrics and PolicyEngine, checks and audits the
	// session requests.
	SessionEgress run.EgressOptions
	Sessions      *session.Manager
	SessionMax    run.Maxima
	// Files, if non-nil (and Sessions too), serves
	// /sessions/{id}/files/{path...}: it is called behind the same
	// authentication, with the caller's session in the request's
	// context (session.FromContext; held with Session.Use until it
	// returns) and the path inside /work in r.PathValue("path"). Another
	// caller's or an unknown session is answered 404 before it.
	Files http.Handler

	// MCP, if non-nil, is mounted at /mcp behind the same authentication
	// as /run; build it with NewMCPHandler over the same runner chain.
	MCP http.Handler

	// AllowedHosts are the names, besides loopback names and IP
	// addresses, that a request's Host may carry ("*": any); other
	// hosts get 403 on every endpoint, against DNS rebinding.
	// AllowedOrigins are browser origins accepted besides loopback ones;
	// requests without Origin (non-browser clients) are accepted. Neither
	// applies to unix-socket connections.
	AllowedHosts   []string
	AllowedOrigins []string

	// Audit, if non-nil, gets a record for each request refused before
	// it became a run (bad body, authentication, Host, Origin); runs are
	// audited by the chain. Pass the same AuditLog as to [run.Chain].
	Audit *run.AuditLog

	// Logger gets the server's own events; nil discards them.
	Logger *slog.Logger

	// Fleet, if not nil, routes each authenticated request for a
	// session to the daemon that holds it (see package route, and
	// fleet.go). Its ids must be the ones the Sessions manager and the
	// MCP handler mint (session.Config.NewID, MCPOptions.SessionID).
	Fleet *route.Router
	// TrustedProxies are the load balancers whose X-Forwarded-For names
	// the caller (see realPeer); from any other peer it is ignored.
	TrustedProxies []netip.Prefix

	// MaxBodyBytes bounds a request body (413 beyond it).
	MaxBodyBytes int64
	// MaxConns bounds the open connections (plus the one Serve is making
	// room for). When they are all open, a new connection takes the place
	// of the longest-idle one; if none is idle, new connections wait in
	// the kernel's accept queue.
	MaxConns int
	// MaxConnsPerPeer bounds the open connections of one peer (a remote
	// IP, or a unix socket's peer uid): a new one beyond it takes the
	// place of that peer's longest-idle connection, or is closed at once
	// if all are busy. Zero means DefaultMaxConnsPerPeer, negative no cap.
	// See connLimiter.
	MaxConnsPerPeer int
	// ReadHeaderTimeout and BodyTimeout bound how long a client may take
	// to send its request (against slow-loris clients); WriteTimeout
	// bounds each write of a response, so a client that stops reading a
	// stream is dropped and its sandbox killed; IdleTimeout closes idle
	// keep-alive connections.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes
	// per second on average once BodyRateGrace has passed since its
	// handler started (a body behind it is cut: 408). It applies to
	// every body, the files API's uploads too, which BodyTimeout does
	// not bound. Zero means DefaultMinBodyRate, negative no minimum.
	// BodyRateGrace zero means DefaultBodyRateGrace.
	MinBodyRate   int64
	BodyRateGrace time.Duration

	// ShutdownGrace is how long Serve lets running commands finish after
	// its ctx is done; then it cancels them (the jail kills their
	// sandboxes) and waits up to KillWait for their handlers to return.
	ShutdownGrace time.Duration
	KillWait      time.Duration

	// RetryAfter is the hint sent with busy answers: 429 (the queue is
	// full) and 503 (the sandboxes' pids budget is used up).
	RetryAfter time.Duration
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxConnsPerPeer == 0 {
		o.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if o.MinBodyRate == 0 {
		o.MinBodyRate = DefaultMinBodyRate
	}
	def(&o.BodyRateGrace, DefaultBodyRateGrace)
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.BodyTimeout, DefaultBodyTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.ShutdownGrace, DefaultShutdownGrace)
	def(&o.KillWait, DefaultKillWait)
	def(&o.RetryAfter, DefaultRetryAfter)
	def(&o.HealthTTL, DefaultHealthTTL)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first option that cannot work. It accepts the zero
// value of every field but Runner.
func (o *Options) Validate() error {
	if o.Runner == nil {
		return errors.New("server: Options.Runner is required")
	}
	if o.MaxBodyBytes < 0 || o.MaxConns < 0 {
		return fmt.Errorf("server: negative MaxBodyBytes %d or MaxConns %d", o.MaxBodyBytes, o.MaxConns)
	}
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": o.ReadHeaderTimeout, "BodyTimeout": o.BodyTimeout,
		"WriteTimeout": o.WriteTimeout, "IdleTimeout": o.IdleTimeout,
		"ShutdownGrace": o.ShutdownGrace, "KillWait": o.KillWait,
		"RetryAfter": o.RetryAfter, "HealthTTL": o.HealthTTL, "BodyRateGrace": o.BodyRateGrace,
	} {
		if d < 0 {
			return fmt.Errorf("server: negative %s %v", name, d)
		}
	}
	return nil
}

// Server is the jaild HTTP daemon. Create it with New, run it with Serve.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *run.Metrics
	handler http.Handler
	http    *http.Server
	health  healthCache
	hosts   hostPolicy
	origins originPolicy
	audit   *run.AuditLog
	// sessions makes and changes sessions (nil without Sessions).
	sessions *run.Sessions

	// baseCtx is the parent of every request's context; cancelling it
	// cancels every run, which makes the jail kill their sandboxes.
	baseCtx    context.Context
	cancelRuns context.CancelFunc

	draining    atomic.Bool  // shutting down: every request is refused
	refusingNew atomic.Bool  // draining: new work is refused (see Drain)
	probes      atomic.Int64 // /readyz requests being served, which load leaves out
	served      atomic.Bool

	// In-flight handlers, so that shutdown can wait for killed runs to be
	// cleaned up. A WaitGroup will not do: requests on kept-alive
	// connections may still start while shutdown waits.
	mu       sync.Mutex
	inflight int
	idle     []chan struct{}
}

// New checks opts and builds a Server. It does not listen; see Serve.
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	s := &Server{opts: opts, log: opts.Logger, metrics: opts.Metrics, audit: opts.Audit,
		hosts: newHostPolicy(opts.AllowedHosts), origins: newOriginPolicy(opts.AllowedOrigins)}
	if s.metrics == nil {
		s.metrics = run.NewMetrics()
	}
	s.health = healthCache{check: opts.Health, ttl: opts.HealthTTL}
	s.baseCtx, s.cancelRuns = context.WithCancel(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("POST /run", s.handleRun)
	mux.HandleFunc("POST /raw", s.handleRaw)
	mux.Handle("GET /metrics", s.metrics.Handler())
	if opts.Sessions != nil {
		s.sessions = &run.Sessions{Manager: opts.Sessions, Max: opts.SessionMax, Egress: opts.SessionEgress,
			Metrics: s.metrics, Audit: opts.Audit, Policy: opts.PolicyEngine}
		s.mountSessions(mux)
	}
	if opts.MCP != nil {
		mcp := s.refuseNewMCP(opts.MCP)
		mux.Handle("/mcp", mcp)
		mux.Handle("/mcp/", mcp)
	}
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", s.handleHealth)
	root.HandleFunc("GET /livez", s.handleLive)
	root.HandleFunc("GET /readyz", s.handleReady)
	root.HandleFunc("GET /openapi.yaml", handleOpenAPI)
	root.Handle("/", s.authenticate(s.routed(mux)))
	s.handler = s.track(s.paceBodies(s.withRequestID(s.realPeer(s.checkOrigin(root)))))

	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		// No ReadTimeout or WriteTimeout: they would cut off long
		// runs and streams. Handlers set per-request deadlines through
		// http.ResponseController instead (see readRequest, stream).
		IdleTimeout:    opts.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		BaseContext:    func(net.Listener) context.Context { return s.baseCtx },
		ConnContext:    connContext,
		ConnState:      trackConnState,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Handler is the server's HTTP handler, for tests and for callers that
// run their own http.Server (they lose the shutdown handling of Serve).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on ln until ctx is done or ln fails, then
// shuts down as Shutdown does with Options.ShutdownGrace. It closes ln and
// returns only when every handler it started has returned (or KillWait
// expired after killing them). Serve may be called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if !s.served.CompareAndSwap(false, true) {
		return errors.New("server: Serve called twice")
	}
	errc := make(chan error, 1)
	cl := newConnLimiter(ln, s.opts.MaxConns, s.opts.MaxConnsPerPeer, s.metrics, s.log)
	go func() { errc <- s.http.Serve(cl) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "network", ln.Addr().Network())

	var serveErr error
	select {
	case err := <-errc:
		// ErrServerClosed: Shutdown was called directly (a kill while
		// draining), not through ctx.
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serve %s: %w", ln.Addr(), err)
		}
		errc = nil
	case <-ctx.Done():
	}
	gctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	err := s.Shutdown(gctx)
	if errc != nil {
		<-errc // http.Server.Serve returns ErrServerClosed once Shutdown began
	}
	return errors.Join(serveErr, err)
}

// Shutdown stops the server gracefully: it stops accepting connections,
// answers new requests on open ones with 503, and waits for running
// commands until ctx is done. Then it cancels them, which kills their
// sandboxes, and waits up to KillWait for their handlers to return. It may
// be called concurrently with itself and with Serve's own shutdown: calling
// it with an expired ctx cuts the grace period short (a second SIGTERM).
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.draining.Swap(true) {
		s.log.Info("shutting down", "running", s.inflightCount())
	}
	// http.Server.Shutdown fails either because ctx expired while
	// connections were still active, or with an error from closing the
	// listener (after waiting for them all the same).
	if err := s.http.Shutdown(ctx); err == nil || ctx.Err() == nil {
		s.cancelRuns()
		return nil
	}
	s.log.Warn("grace period over, killing running commands", "running", s.inflightCount())
	s.cancelRuns()
	kctx, cancel := context.WithTimeout(context.Background(), s.opts.KillWait)
	defer cancel()
	werr := s.waitIdle(kctx)
	// A handler that returned may not have finished its response on the
	// wire yet (net/http ends it after the handler): give those
	// connections a moment to go idle, then drop what is left.
	fctx, fcancel := context.WithTimeout(context.Background(), time.Second)
	defer fcancel()
	s.http.Shutdown(fctx)
	s.http.Close()
	if werr != nil {
		return fmt.Errorf("server: handlers still running after kill wait: %w", werr)
	}
	return nil
}

// track counts in-flight handlers for waitIdle.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.inflight++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inflight--
			if s.inflight == 0 {
				for _, c := range s.idle {
					close(c)
				}
				s.idle = nil
			}
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) inflightCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

func (s *Server) waitIdle(ctx context.Context) error {
	s.mu.Lock()
	if s.inflight == 0 {
		s.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	s.idle = append(s.idle, c)
	s.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// healthCache runs the health check at most once per ttl, whatever the
// request rate; concurrent requests share one check. Only the first check
// is waited for: once there is an answer, an expired one is still given
// while a fresh check runs in the background, so that /healthz and /readyz
// answer at once even while a check builds its sandbox (a fleet's daemons
// read each other's /readyz with a short timeout).
type healthCache struct {
	check func(context.Context) error
	ttl   time.Duration

	mu      sync.Mutex
	at      time.Time
	err     error
	running chan struct{} // closed when the running check ends
}

func (h *healthCache) get(ctx context.Context) error {
	if h.check == nil {
		return nil
	}
	h.mu.Lock()
	if !h.at.IsZero() {
		err := h.err
		if time.Since(h.at) >= h.ttl && h.running == nil {
			h.running = make(chan struct{})
			go h.refresh(context.WithoutCancel(ctx))
		}
		h.mu.Unlock()
		return err
	}
	if c := h.running; c != nil {
		h.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	}
	h.running = make(chan struct{})
	h.mu.Unlock()
	// The check outlives the asking request's cancellation: other
	// requests wait for its result.
	return h.refresh(context.WithoutCancel(ctx))
}

// refresh runs the check that get marked running and records its answer.
func (h *healthCache) refresh(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := h.check(cctx)
	cancel()
	h.mu.Lock()
	c := h.running
	h.at, h.err, h.running = time.Now(), err, nil
	h.mu.Unlock()
	close(c)
	return err
}
