package route

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/api"
)

// Defaults of Config.
const (
	DefaultDialTimeout  = 3 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	DefaultBodyTimeout  = 30 * time.Second
	// forwardedSkew is how old (or how far in the future) a forwarded
	// header may be: peers' clocks are NTP-synchronized, and a header is
	// used within the second it is made.
	forwardedSkew = time.Minute
)

// Header names.
const (
	// ForwardedHeader marks a request one daemon sent another; see
	// Router.ForwardedPeer. It is set only by Router.Handler.
	ForwardedHeader = "Jaild-Forwarded"
	// NodeHeader names the instance that served a request, on every
	// answer a Router serves locally: a caller (or a test) can tell
	// where its session lives.
	NodeHeader = "Jaild-Node"
	// mcpSessionHeader is MCP's Streamable HTTP session header.
	mcpSessionHeader = "Mcp-Session-Id"
)

// Config configures a Router. Key and Advertise are required; every other
// zero field means its default.
type Config struct {
	// Key is the fleet key (LoadKey), the same on every daemon of the
	// fleet: the MAC key of route tokens and forwarded headers. It signs
	// (ids this daemon mints, headers it sends) and is accepted.
	Key []byte
	// AcceptKeys are keys, besides Key, under which route tokens and
	// forwarded headers are accepted, never signed: the keys of a
	// rotation (the next key before every daemon signs with it, the old
	// one while ids minted under it live). None may equal Key or
	// another. Nil: Key alone.
	AcceptKeys [][]byte
	// Advertise is where peers reach this daemon: a specific address,
	// not 0.0.0.0 or a multicast one.
	Advertise netip.AddrPort
	// PeerCIDRs, if not empty, are the only networks a request is
	// forwarded to, besides the MAC (defense in depth: a leaked key
	// cannot aim the fleet elsewhere).
	PeerCIDRs []netip.Prefix
	// TLS, if not nil, is how peers are dialled: https, verified with
	// its RootCAs (and ServerName, if set; else the peer's IP address
	// must be in its certificate). Nil: plain http.
	TLS *tls.Config
	// DialTimeout bounds connecting to a peer; a peer not reached in time
	// is taken as gone (410 session_lost).
	DialTimeout time.Duration
	// MaxBodyBytes bounds how much of a POST /run or /raw body is read to
	// find its session_id; a larger body is served locally, which refuses
	// it. BodyTimeout bounds how long the body may take.
	MaxBodyBytes int64
	BodyTimeout  time.Duration
	// Logger gets forwarding failures and forged tokens; nil discards.
	Logger *slog.Logger

	// Peers are the fleet's daemons, as HOST:PORT (a name may resolve
	// to many, as a headless Service's does), resolved again at each
	// poll; this daemon's advertise address among them is skipped. With
	// peers, and while Poll runs, new work goes to the least-loaded
	// ready daemon (see balance.go). Empty: it is served where received.
	Peers []string
	// PollInterval is how often Poll reads every daemon's /readyz;
	// PollTimeout bounds each read (and each name's resolution).
	PollInterval time.Duration
	PollTimeout  time.Duration
}

// Router mints self-routing ids and forwards requests to the daemon their
// id names. It is safe for concurrent use.
type Router struct {
	cfg   Config
	keys  atomic.Pointer[keyring] // swapped whole by SetKeys
	self  Token
	node  string // hex instance id, for NodeHeader
	proxy *httputil.ReverseProxy
	log   *slog.Logger
	// transport and scheme reach peers, for forwarding and for polling.
	transport *http.Transport
	scheme    string
	bal       balancer
}

// New checks cfg and returns a Router with a fresh instance id.
func New(cfg Config) (*Router, error) {
	keys, err := newKeyring(cfg.Key, cfg.AcceptKeys)
	if err != nil {
		return nil, err
	}
	if err := checkAdvertise(cfg.Advertise); err != nil {
		return nil, err
	}
	if cfg.DialTimeout < 0 || cfg.MaxBodyBytes < 0 || cfg.BodyTimeout < 0 || cfg.PollInterval < 0 || cfg.PollTimeout < 0 {
		return nil, errors.New("route: negative DialTimeout, MaxBodyBytes, BodyTimeout, PollInterval or PollTimeout")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.PollTimeout == 0 {
		cfg.PollTimeout = DefaultPollTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Key, cfg.AcceptKeys = nil, nil // the keyring holds them, SetKeys changes them
	rt := &Router{cfg: cfg, log: cfg.Logger}
	rt.keys.Store(keys)
	rt.self.Addr = netip.AddrPortFrom(cfg.Advertise.Addr().Unmap(), cfg.Advertise.Port())
	if _, err := rand.Read(rt.self.Instance[:]); err != nil {
		return nil, fmt.Errorf("route: instance id: %w", err)
	}
	rt.node = hex.EncodeToString(rt.self.Instance[:])
	rt.proxy = rt.newProxy()
	return rt, nil
}

func checkAdvertise(a netip.AddrPort) error {
	ip := a.Addr()
	switch {
	case !a.IsValid() || a.Port() == 0:
		return fmt.Errorf("route: advertise address %v: want IP:PORT", a)
	case ip.IsUnspecified() || ip.IsMulticast():
		return fmt.Errorf("route: advertise address %v: want the address peers reach this daemon at, not %v", a, ip)
	case ip.Zone() != "":
		return fmt.Errorf("route: advertise address %v: no zone", a)
	}
	return nil
}

// SetKeys makes key the signing key and accept the other accepted keys,
// as Config.Key and Config.AcceptKeys, from the next request on: a
// daemon steps through a key rotation without restarting, and so without
// losing its sessions. On an error the keys in use are kept.
func (rt *Router) SetKeys(key []byte, accept [][]byte) error {
	keys, err := newKeyring(key, accept)
	if err != nil {
		return err
	}
	rt.keys.Store(keys)
	return nil
}

// Instance is this daemon's instance id, as NodeHeader carries it.
func (rt *Router) Instance() string { return rt.node }

// NewID is a fresh session id that routes to this daemon.
func (rt *Router) NewID() string { return rt.keys.Load().newID(rt.self) }

// Handler serves r locally when its session id is this daemon's (or it has
// none, or none whose MAC holds), and forwards it otherwise. peer returns
// the caller's address as the daemon resolved it (trusted proxies, a
// forwarding peer), which the forwarded request carries to the peer.
//
// Mount it behind authentication: a caller that has no token gets its 401
// from this daemon, and so cannot make it open connections to peers, or
// make it buffer a body to look for a session_id. The peer authenticates
// the forwarded Authorization header again.
func (rt *Router) Handler(next http.Handler, peer func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := rt.sessionID(w, r)
		if !ok {
			return
		}
		if newWork(r, id) {
			// A forwarded request was balanced by the daemon that
			// sent it: it is served here, whatever the loads.
			if _, forwarded := rt.ForwardedPeer(r); !forwarded {
				if a, ok := rt.pick(); ok {
					rt.forwardNew(w, r, a, peer(r), next)
					return
				}
			}
			rt.local(w, r, next)
			return
		}
		t, ok := rt.keys.Load().parse(id)
		if !ok {
			if strings.Contains(id, Sep) {
				rt.log.Warn("session id with a route token that fails its check: served as unknown", "path", r.URL.Path)
			}
			rt.local(w, r, next)
			return
		}
		if t == rt.self {
			rt.local(w, r, next)
			return
		}
		// Not ours. A forwarded request is never forwarded again, and
		// an id naming our own address is of a daemon that ran here
		// before us: in both cases the session's node is gone.
		_, forwarded := rt.ForwardedPeer(r)
		if forwarded || t.Addr == rt.self.Addr {
			rt.lost(w, r, id, "an instance that no longer runs")
			return
		}
		if !rt.allowedPeer(t.Addr.Addr()) {
			rt.log.Warn("route token names an address outside the peer networks: served as unknown", "addr", t.Addr.String())
			rt.local(w, r, next)
			return
		}
		rt.forward(w, r, t, id, peer(r))
	})
}

func (rt *Router) local(w http.ResponseWriter, r *http.Request, next http.Handler) {
	w.Header().Set(NodeHeader, rt.node)
	next.ServeHTTP(w, r)
}

func (rt *Router) allowedPeer(ip netip.Addr) bool {
	if ip.IsUnspecified() || ip.IsMulticast() {
		return false
	}
	if len(rt.cfg.PeerCIDRs) == 0 {
		return true
	}
	for _, p := range rt.cfg.PeerCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// sessionID finds the session r is for: the {id} of a /sessions/{id}...
// path, the Mcp-Session-Id of an /mcp request, or the session_id of a POST
// /run or /raw body (read up to MaxBodyBytes and put back). It answers and
// returns false only when reading the body failed.
func (rt *Router) sessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/sessions/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id, true
	}
	if p == "/mcp" || strings.HasPrefix(p, "/mcp/") {
		return r.Header.Get(mcpSessionHeader), true
	}
	if r.Method != http.MethodPost || (p != "/run" && p != "/raw") || r.Body == nil || r.Body == http.NoBody {
		return "", true
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return "", true // refused locally
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(rt.cfg.BodyTimeout))
	buf, err := io.ReadAll(io.LimitReader(r.Body, rt.cfg.MaxBodyBytes+1))
	_ = rc.SetReadDeadline(time.Time{})
	// Whatever was read goes back in front of the rest, so that the
	// handler that serves the request sees (and judges) the whole body.
	r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			writeError(w, http.StatusRequestTimeout, &api.ErrorResponse{
				Error: "request body not received within " + rt.cfg.BodyTimeout.String(), Code: api.CodeBodyTimeout})
			return "", false
		}
		return "", true // the handler meets the same error and says so
	}
	if int64(len(buf)) > rt.cfg.MaxBodyBytes {
		return "", true // refused locally: too large
	}
	var body struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(buf, &body) != nil {
		return "", true // refused locally: bad JSON
	}
	return body.SessionID, true
}

type readCloser struct {
	io.Reader
	io.Closer
}

// lost answers a request for a session whose node is gone.
func (rt *Router) lost(w http.ResponseWriter, r *http.Request, id, why string) {
	rt.log.Info("session lost with its node", "session", id, "why", why, "path", r.URL.Path)
	writeError(w, http.StatusGone, &api.ErrorResponse{
		Error: fmt.Sprintf("the node that held session %s is gone (%s): its workspace and files are lost; create a new session", id, why),
		Code:  api.CodeSessionLost})
}

func writeError(w http.ResponseWriter, status int, e *api.ErrorResponse) {
	body, _ := json.Marshal(e)
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	w.Write(body)
}

// forwardKey carries a forwarded request's route to the proxy's hooks.
type forwardKey struct{}

type forwarding struct {
	target Token
	id     string
	peer   string
	// fallback: new work, served locally if the peer cannot be dialled
	// (forwardError then only sets dialFailed and answers nothing).
	fallback   bool
	dialFailed bool
}

func (rt *Router) forward(w http.ResponseWriter, r *http.Request, t Token, id, peer string) {
	// The answer's X-Request-Id is the peer's, whose log has the run.
	w.Header().Del("X-Request-Id")
	ctx := context.WithValue(r.Context(), forwardKey{}, &forwarding{target: t, id: id, peer: peer})
	rt.proxy.ServeHTTP(w, r.WithContext(ctx))
}

func (rt *Router) newProxy() *httputil.ReverseProxy {
	dialer := &net.Dialer{Timeout: rt.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     rt.cfg.TLS,
		TLSHandshakeTimeout: rt.cfg.DialTimeout,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		// No ResponseHeaderTimeout: a /run answers when its command
		// ends, up to the maximum timeout. The caller's going away
		// cancels the forwarded request, which kills the sandbox there.
		ForceAttemptHTTP2: false,
	}
	scheme := "http"
	if rt.cfg.TLS != nil {
		scheme = "https"
	}
	rt.transport, rt.scheme = tr, scheme
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := pr.In.Context().Value(forwardKey{}).(*forwarding)
			pr.SetURL(&url.URL{Scheme: scheme, Host: f.target.Addr.String()})
			// Rewrite already dropped the caller's X-Forwarded-*: the
			// peer learns the caller from the MACed header alone.
			pr.Out.Header.Set(ForwardedHeader, rt.forwardedValue(f.peer, time.Now(), pr.Out.Method, pr.Out.URL.Path))
		},
		Transport:     tr,
		FlushInterval: -1, // NDJSON and SSE streams pass each write on at once
		ErrorLog:      slog.NewLogLogger(rt.log.Handler(), slog.LevelDebug),
		ErrorHandler:  rt.forwardError,
	}
}

// forwardError answers a forwarded request that got no answer: 410 if the
// peer could not be reached (it is gone, and its sessions with it), 502 if
// it was reached and failed. Not 503: balancers retry 503 elsewhere
// (HAProxy retry-on 503), and the peer may have run the command already.
func (rt *Router) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	f := r.Context().Value(forwardKey{}).(*forwarding)
	if r.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	if f.fallback {
		if isDial(err) {
			f.dialFailed = true
			return
		}
		rt.log.Warn("forwarding new work to the least-loaded node failed", "node", f.target.Addr.String(), "err", err)
		writeForwardFailed(w, "the node chosen for this request")
		return
	}
	if isDial(err) {
		rt.lost(w, r, f.id, "unreachable at "+f.target.Addr.String())
		return
	}
	rt.log.Warn("forwarding to the session's node failed", "session", f.id, "node", f.target.Addr.String(), "err", err)
	writeForwardFailed(w, "the node that holds session "+f.id)
}

func writeForwardFailed(w http.ResponseWriter, node string) {
	writeError(w, http.StatusBadGateway, &api.ErrorResponse{
		Error: node + " failed to answer; the call may or may not have run", Code: api.CodeUnavailable})
}

// forwardedValue is the ForwardedHeader of a request forwarded at t on
// behalf of peer: "peer;unix-seconds;mac", under the signing key. The MAC
// binds the request line, so a header seen on one request cannot be moved
// to another.
func (rt *Router) forwardedValue(peer string, t time.Time, method, path string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := rt.keys.Load().mac(fwdDomain, forwardedParts(peer, ts, method, path)...)
	return peer + ";" + ts + ";" + base64.RawURLEncoding.EncodeToString(mac[:macLen])
}

func forwardedParts(peer, ts, method, path string) [][]byte {
	return [][]byte{[]byte(peer), {0}, []byte(ts), {0}, []byte(method), {0}, []byte(path)}
}

// ForwardedPeer reports whether r was forwarded by a daemon of the fleet
// (its ForwardedHeader holds under one of the accepted keys, and is
// recent), and the caller's address that daemon resolved. A header that
// does not hold is ignored: a caller cannot claim another address, nor
// keep its request from being routed.
func (rt *Router) ForwardedPeer(r *http.Request) (string, bool) {
	v := r.Header.Get(ForwardedHeader)
	if v == "" {
		return "", false
	}
	rest, enc, ok1 := cutLast(v, ";")
	peer, ts, ok2 := cutLast(rest, ";")
	if !ok1 || !ok2 || len(enc) != base64.RawURLEncoding.EncodedLen(macLen) {
		return "", false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts { // one spelling per time: "+5", "05" are not it
		return "", false
	}
	if d := time.Since(time.Unix(sec, 0)); d > forwardedSkew || d < -forwardedSkew {
		return "", false
	}
	sum, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || !rt.keys.Load().verify(sum, fwdDomain, forwardedParts(peer, ts, r.Method, r.URL.Path)...) {
		return "", false
	}
	return peer, true
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
