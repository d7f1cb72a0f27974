package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/box"
)

// runState is one run's proxy: its grant, counters and connections.
type runState struct {
	p *Proxy
	g Grant

	bytesIn, bytesOut atomic.Int64
	conns             atomic.Int64 // connections asked for past the allowlists
	allowed, denied   atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{} // hijacked and upstream connections
	closed bool
	wg     sync.WaitGroup // handlers and tunnels
}

// Serve serves the proxy for one run on ln (the listener in the
// sandbox's network namespace) until ctx ends, then closes ln and every
// connection, and returns the run's counters. Its signature, with g bound,
// is jail.Egress.Serve's.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, g Grant) box.EgressUsage {
	return p.Start(g).Serve(ctx, ln)
}

// Serving is one grant's proxy whose counters can be read while it serves:
// a session's, served for the session's life.
type Serving struct{ r *runState }

// Start returns the proxy of grant g, to be served once with Serve.
func (p *Proxy) Start(g Grant) *Serving {
	return &Serving{r: &runState{p: p, g: g, open: map[net.Conn]struct{}{}}}
}

// Usage is what the proxy counted so far.
func (s *Serving) Usage() box.EgressUsage { return s.r.usage() }

// Serve is [Proxy.Serve] with the grant given to Start. Call it once.
func (s *Serving) Serve(ctx context.Context, ln net.Listener) box.EgressUsage {
	r := s.r
	tr := &http.Transport{
		Proxy:                 nil, // never jaild's own proxy settings
		DialContext:           r.dialFromContext,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	rp := &httputil.ReverseProxy{
		// The absolute URL the client asked for, as it is; Rewrite (not
		// Director) drops X-Forwarded-* and ReverseProxy the hop-by-hop
		// headers. Redirects are not followed: the client's next
		// request is decided again.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = pr.In.Host
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			refuse(w, err)
		},
	}
	srv := &http.Server{
		Handler:           r.handler(rp),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	<-ctx.Done()
	// Close ends the listener and the connections the server still
	// tracks; hijacked tunnels and upstreams are closed here.
	_ = srv.Close()
	<-served
	r.mu.Lock()
	r.closed = true
	for c := range r.open {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	tr.CloseIdleConnections()
	return r.usage()
}

// track registers c to be closed when the run ends; false if it has.
func (r *runState) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.open[c] = struct{}{}
	return true
}

func (r *runState) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.open, c)
	r.mu.Unlock()
}

// handler serves CONNECT tunnels and absolute-URI http requests; anything
// else is not a proxy request.
func (r *runState) handler(rp *httputil.ReverseProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.wg.Add(1)
		defer r.wg.Done()
		switch {
		case req.Method == http.MethodConnect:
			r.connect(w, req)
		case req.URL.IsAbs() && req.URL.Scheme == "http" && req.URL.Host != "":
			r.forward(w, req, rp)
		case req.URL.IsAbs():
			refuse(w, &Denied{Err: ErrBadTarget, Reason: fmt.Sprintf("%s URLs are not proxied: use CONNECT (https_proxy) for TLS", req.URL.Scheme)})
		default:
			refuse(w, &Denied{Err: ErrBadTarget, Reason: "not a proxy request: send CONNECT host:port or an absolute http:// URL"})
		}
	})
}

// addrsKey carries a forwarded request's checked addresses to the dialer.
type addrsKey struct{}

type checked struct {
	addrs []netip.Addr
	port  int
}

// forward proxies one plain-HTTP request.
func (r *runState) forward(w http.ResponseWriter, req *http.Request, rp *httputil.ReverseProxy) {
	host, port, addrs, err := r.decide(req.Context(), req.URL.Host, 80)
	if err != nil {
		r.record(host, port, "", err)
		refuse(w, err)
		return
	}
	r.record(host, port, addrs[0].String(), nil)
	ctx := context.WithValue(req.Context(), addrsKey{}, checked{addrs, port})
	rp.ServeHTTP(w, req.WithContext(ctx))
}

// dialFromContext is the Transport's dialer: it dials only what decide
// returned for the request.
func (r *runState) dialFromContext(ctx context.Context, _, _ string) (net.Conn, error) {
	c, ok := ctx.Value(addrsKey{}).(checked)
	if !ok {
		return nil, errors.New("egress: no checked address for this connection")
	}
	conn, err := r.dial(ctx, c.addrs, c.port)
	if err != nil {
		return nil, err
	}
	if !r.track(conn) {
		return nil, net.ErrClosed
	}
	return &untrackOnClose{Conn: conn, r: r}, nil
}

// connect serves one CONNECT tunnel: decided, dialed, then the bytes are
// copied both ways as they are (no TLS interception).
func (r *runState) connect(w http.ResponseWriter, req *http.Request) {
	host, port, addrs, err := r.decide(req.Context(), req.Host, 443)
	if err != nil {
		r.record(host, port, "", err)
		refuse(w, err)
		return
	}
	up, err := r.dial(req.Context(), addrs, port)
	if err != nil {
		r.record(host, port, "", err)
		refuse(w, err)
		return
	}
	r.record(host, port, up.RemoteAddr().String(), nil)
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "jaild egress: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !r.track(down) || !r.track(up) {
		down.Close()
		up.Close()
		return
	}
	defer func() {
		r.untrack(down)
		r.untrack(up)
		down.Close()
		up.Close()
	}()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Each direction half-closes the other side at its EOF, so that an
	// answer may still come back; an error (the byte cap, a reset) ends
	// the tunnel both ways at once.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// What the client sent after its CONNECT is in brw's buffer.
		if _, err := io.Copy(up, brw.Reader); err != nil {
			down.Close()
			up.Close()
			return
		}
		closeWrite(up)
	}()
	if _, err := io.Copy(down, up); err != nil {
		down.Close()
		up.Close()
	} else {
		closeWrite(down)
	}
	wg.Wait()
}

// closeWrite half-closes c if it can, so that the other side sees EOF
// while its answer may still come back.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	if cc, ok := c.(*countedConn); ok {
		closeWrite(cc.Conn)
	}
}

// refuse answers a refused or failed connection: 403 with the reason for a
// refusal, 502 for an upstream that failed.
func refuse(w http.ResponseWriter, err error) {
	status, msg := http.StatusBadGateway, "jaild egress: "+err.Error()
	var d *Denied
	if errors.As(err, &d) {
		status, msg = http.StatusForbidden, d.Error()
		if errors.Is(d.Err, ErrBadTarget) {
			status = http.StatusBadRequest
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Jaild-Egress", "refused")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

// countedConn counts an upstream connection's bytes against the run and
// stops it at the run's byte cap.
type countedConn struct {
	net.Conn
	r *runState
}

func (c *countedConn) over() bool {
	max := c.r.p.cfg.MaxBytes
	return max > 0 && c.r.bytesIn.Load()+c.r.bytesOut.Load() > max
}

var errByteCap = errors.New("egress: the run's byte cap is reached")

func (c *countedConn) Read(b []byte) (int, error) {
	if c.over() {
		return 0, errByteCap
	}
	n, err := c.Conn.Read(b)
	c.r.bytesIn.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	if c.over() {
		return 0, errByteCap
	}
	n, err := c.Conn.Write(b)
	c.r.bytesOut.Add(int64(n))
	return n, err
}

func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// untrackOnClose forgets a pooled upstream connection once the
// Transport closes it.
type untrackOnClose struct {
	net.Conn
	r *runState
}

func (u *untrackOnClose) Close() error {
	u.r.untrack(u.Conn)
	return u.Conn.Close()
}
