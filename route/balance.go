package route

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config's balancing fields.
const (
	DefaultPollInterval = time.Second
	DefaultPollTimeout  = 500 * time.Millisecond
	// maxReadyBytes bounds a /readyz body read from a peer.
	maxReadyBytes = 4 << 10
)

// A daemon in a fleet serves new work (a new session, a one-shot run, an MCP
// initialize) itself unless a ready peer is less loaded by a margin, in
// which case the request goes there once, as a session's request would.
// Every daemon, this one included, is judged by the load its /readyz
// reports, polled at the same interval, so that all are compared alike.
// A peer that was just sent work is counted one busier until its next
// poll, so that a burst does not all land on the same peer.

// peerState is what the last poll learnt of a daemon.
type peerState struct {
	addr  netip.AddrPort
	ok    bool // it answered /readyz with a body that has a load
	ready bool // the answer was 200
	load  float64
}

type balancer struct {
	mu    sync.Mutex
	self  peerState
	peers []peerState
	// polled is set after the first poll, for tests.
	polled atomic.Bool
	// shown is, per peer, whether the log last said it may be sent new
	// work; only the poll loop uses it.
	shown map[netip.AddrPort]bool
}

// Poll keeps the loads of this daemon and of its peers (Config.Peers) up to
// date, every PollInterval, until ctx is done; without peers it returns at
// once. New work is balanced only while it runs.
func (rt *Router) Poll(ctx context.Context) {
	if len(rt.cfg.Peers) == 0 {
		return
	}
	t := time.NewTicker(rt.cfg.PollInterval)
	defer t.Stop()
	for {
		rt.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollOnce resolves the peers and reads every daemon's /readyz
// concurrently; it returns when all have answered or timed out.
func (rt *Router) pollOnce(ctx context.Context) {
	addrs := rt.resolvePeers(ctx)
	states := make([]peerState, len(addrs)+1)
	var wg sync.WaitGroup
	for i, a := range append([]netip.AddrPort{rt.self.Addr}, addrs...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i] = rt.readyz(ctx, a)
		}()
	}
	wg.Wait()
	rt.bal.mu.Lock()
	rt.bal.self, rt.bal.peers = states[0], states[1:]
	rt.bal.mu.Unlock()
	if rt.bal.shown == nil {
		rt.bal.shown = make(map[netip.AddrPort]bool)
	}
	for _, p := range states[1:] {
		if p.candidate() != rt.bal.shown[p.addr] {
			rt.bal.shown[p.addr] = p.candidate()
			rt.logPeer(p)
		}
	}
	if rt.log.Enabled(ctx, slog.LevelDebug) {
		loads := make(map[string]float64, len(states))
		for _, p := range states {
			if p.candidate() {
				loads[p.addr.String()] = p.load
			}
		}
		rt.log.Debug("fleet polled: the loads of the ready daemons, this one included", "loads", loads)
	}
	rt.bal.polled.Store(true)
}

// candidate reports whether new work may go to the peer.
func (p peerState) candidate() bool { return p.ok && p.ready }

// logPeer tells that a peer became a candidate for new work, or stopped
// being one (not ready: it drains, or is gone).
func (rt *Router) logPeer(p peerState) {
	if p.candidate() {
		rt.log.Info("fleet peer ready: it may be sent new work", "node", p.addr.String(), "load", p.load)
		return
	}
	rt.log.Info("fleet peer not ready: no new work goes to it", "node", p.addr.String(), "answered", p.ok)
}

// resolvePeers is the addresses of Config.Peers, without this daemon's
// and outside PeerCIDRs; a name that does not resolve names no peer.
func (rt *Router) resolvePeers(ctx context.Context) []netip.AddrPort {
	seen := map[netip.AddrPort]bool{rt.self.Addr: true}
	var out []netip.AddrPort
	for _, hp := range rt.cfg.Peers {
		host, ps, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			continue
		}
		ips, err := lookup(ctx, host, rt.cfg.PollTimeout)
		if err != nil {
			rt.log.Debug("resolving peers", "peers", hp, "err", err)
			continue
		}
		for _, ip := range ips {
			a := netip.AddrPortFrom(ip.Unmap(), uint16(port))
			if !seen[a] && rt.allowedPeer(a.Addr()) {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

func lookup(ctx context.Context, host string, timeout time.Duration) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// readyz reads a's GET /readyz over the transport requests are forwarded
// on.
func (rt *Router) readyz(ctx context.Context, a netip.AddrPort) peerState {
	st := peerState{addr: a}
	ctx, cancel := context.WithTimeout(ctx, rt.cfg.PollTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rt.scheme+"://"+a.String()+"/readyz", nil)
	if err != nil {
		return st
	}
	resp, err := rt.transport.RoundTrip(req)
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	var h struct {
		Load *float64 `json:"load"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, maxReadyBytes)).Decode(&h) != nil || h.Load == nil {
		return st
	}
	st.ok, st.ready, st.load = true, resp.StatusCode == http.StatusOK, *h.Load
	return st
}

// pick is the peer to send new work to, if there is one: the least loaded
// ready peer, when this daemon is not ready (it drains) or is busier than
// that peer by the margin. A daemon whose own state is unknown serves
// locally.
func (rt *Router) pick() (netip.AddrPort, bool) {
	b := &rt.bal
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.self.ok {
		return netip.AddrPort{}, false
	}
	best := -1
	for i, p := range b.peers {
		if p.candidate() && (best < 0 || p.load < b.peers[best].load) {
			best = i
		}
	}
	if best < 0 {
		return netip.AddrPort{}, false
	}
	p := &b.peers[best]
	if b.self.ready && b.self.load-p.load < margin(b.self.load) {
		return netip.AddrPort{}, false
	}
	p.load++
	return p.addr, true
}

// margin is how much busier than a peer this daemon must be to send it
// new work: at least 2, and a quarter of its load, so that two daemons of
// nearly equal loads do not send each other work back and forth.
func margin(self float64) float64 { return math.Max(2, self/4) }

// markDown takes a out of the candidates until the next poll.
func (rt *Router) markDown(a netip.AddrPort) {
	rt.bal.mu.Lock()
	defer rt.bal.mu.Unlock()
	for i := range rt.bal.peers {
		if rt.bal.peers[i].addr == a {
			rt.bal.peers[i].ready = false
		}
	}
}

// newWork reports whether r would start work on whichever daemon serves
// it; id is the session it names, if any.
func newWork(r *http.Request, id string) bool {
	if id != "" || r.Method != http.MethodPost {
		return false
	}
	switch r.URL.Path {
	case "/sessions", "/run", "/raw", "/mcp", "/mcp/":
		return true
	}
	return false
}

// forwardNew sends new work to the peer at a. If the peer cannot be
// dialled, nothing of the request has left this daemon, and it is served
// locally instead; any later failure is answered as a session's would be,
// for the peer may have started the work.
func (rt *Router) forwardNew(w http.ResponseWriter, r *http.Request, a netip.AddrPort, peer string, next http.Handler) {
	reqID := w.Header().Get("X-Request-Id")
	body := &guardedBody{r: r.Body}
	fr := r.Clone(r.Context())
	if r.Body != nil && r.Body != http.NoBody {
		fr.Body = body
	}
	f := &forwarding{target: Token{Addr: a}, peer: peer, fallback: true}
	w.Header().Del("X-Request-Id")
	rt.proxy.ServeHTTP(w, fr.WithContext(context.WithValue(fr.Context(), forwardKey{}, f)))
	if !f.dialFailed {
		return
	}
	if body.read.Load() {
		// Not expected after a dial error; never serve a request twice.
		writeForwardFailed(w, "the node chosen for this request")
		return
	}
	rt.markDown(a)
	if reqID != "" {
		w.Header().Set("X-Request-Id", reqID)
	}
	rt.log.Info("the least-loaded peer is unreachable: served here", "node", a.String())
	rt.local(w, r, next)
}

// guardedBody is a request body lent to the proxy: it records whether any
// of it was read, and its Close leaves the request's body open, for the
// request to be served locally after a failed dial.
type guardedBody struct {
	r    io.Reader
	read atomic.Bool
}

func (g *guardedBody) Read(p []byte) (int, error) {
	g.read.Store(true)
	return g.r.Read(p)
}

func (g *guardedBody) Close() error { return nil }

// isDial reports whether err is a failure to connect.
func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
