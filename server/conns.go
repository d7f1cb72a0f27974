package server

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jaild/jaild/run"
)

// staleNewConn is how long a connection may stay open without sending the
// first byte of a request before it may be reclaimed for another one, as
// idle keep-alive connections may at once. A real client writes its request
// as soon as it has connected (and, with TLS, shaken hands), within a few
// round trips; one that says nothing for this long is slow or hostile, and
// ReadHeaderTimeout would drop it soon anyway. (net/http's Shutdown draws
// the same line at 5s.) It is not an option: it only decides which
// connection goes when the server is full.
const staleNewConn = 2 * time.Second

// connLimiter is the listener Serve gives net/http. It holds at most max
// connections, at most perPeer of them (if perPeer > 0) from one peer, and
// makes room for new connections by closing idle ones:
//
//   - A new connection from a peer at its cap takes the place of that
//     peer's longest-idle connection; if the peer has none (all its
//     connections are busy), the new one is closed at once, without an
//     answer. A 429 would have to be written as raw bytes before the
//     request was read (and in clear text under TLS), or would cost a
//     server-wide place and a goroutine per refused connection, which is
//     what the cap is there to bound.
//   - When the server is full, a new connection takes the place of the
//     longest-idle connection of any peer. If none is idle, Accept waits
//     for one to close or go idle, and further connections wait in the
//     kernel's backlog.
//
// "Idle" is a keep-alive connection between requests (http.StateIdle) or
// one that has sent nothing for staleNewConn (http.StateNew). Busy
// connections (a request being read, run or answered; hijacked ones) are
// never closed. HTTP/1.1 lets a server close an idle connection at any
// time; a client whose next request crosses the close on the wire sees the
// connection drop, as it would at IdleTimeout. Likewise net/http marks a
// connection idle a moment after its answer went out, so a peer at its cap
// that opens a new connection the instant it has read an answer may be
// refused: a client holding that many connections should reuse them.
//
// The peer is the remote IP for TCP (an IPv6 /64, which one host usually
// holds whole) and the uid from SO_PEERCRED for a unix socket, so callers
// that share an address (every loopback client is 127.0.0.1) share a cap.
//
// It learns the state of its connections from http.Server.ConnState
// (trackConnState). (golang.org/x/net/netutil has a LimitListener, but its
// connections hide the *net.UnixConn that SO_PEERCRED needs.)
type connLimiter struct {
	net.Listener
	max, perPeer int
	metrics      *run.Metrics
	log          *slog.Logger

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	peers map[string]int
	// wake, if non-nil, is closed when a place may have freed: a
	// connection closed or went idle. Accept sets it while it waits.
	wake chan struct{}

	done      chan struct{}
	closeOnce sync.Once
}

func newConnLimiter(ln net.Listener, max, perPeer int, m *run.Metrics, log *slog.Logger) *connLimiter {
	return &connLimiter{
		Listener: ln, max: max, perPeer: perPeer, metrics: m, log: log,
		conns: map[*trackedConn]struct{}{}, peers: map[string]int{},
		done: make(chan struct{}),
	}
}

// trackedConn is a connection the limiter counts until it is closed.
type trackedConn struct {
	net.Conn
	l    *connLimiter
	peer string

	// Guarded by l.mu.
	state http.ConnState
	since time.Time // when state was entered
	gone  bool      // no longer counted
	// receiving: its request's headers are read, its body not yet
	// (StateActive until the handler has read the body or has none).
	receiving bool
	// taken: closed for another peer's connection while receiving.
	taken bool
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, err := l.admit(c)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			return tc, nil
		}
	}
}

// admit counts c in, making room for it, or closes it and returns nil if
// its peer is at its cap with nothing idle. It waits while the server is
// full of busy connections, and fails only if the listener is closed.
func (l *connLimiter) admit(c net.Conn) (*trackedConn, error) {
	peer := peerAddr(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		now := time.Now()
		if l.perPeer > 0 && l.peers[peer] >= l.perPeer {
			if l.reclaimLocked(peer, now) {
				continue
			}
			c.Close()
			l.metrics.ConnDropped(run.ConnPeerLimit)
			l.log.Debug("connection refused: peer at its limit", "peer", peer, "limit", l.perPeer)
			return nil, nil
		}
		if len(l.conns) < l.max {
			break
		}
		if l.reclaimLocked("", now) || l.reclaimSlowLocked(peer, now) {
			continue
		}
		if err := l.waitLocked(peer, now); err != nil {
			c.Close()
			return nil, err
		}
	}
	tc := &trackedConn{Conn: c, l: l, peer: peer, state: http.StateNew, since: time.Now()}
	l.conns[tc] = struct{}{}
	l.peers[peer]++
	return tc, nil
}

// reclaimLocked closes the longest-idle connection, of peer if peer is not
// "", and reports whether there was one.
func (l *connLimiter) reclaimLocked(peer string, now time.Time) bool {
	var victim *trackedConn
	for tc := range l.conns {
		if peer != "" && tc.peer != peer || !tc.idle(now) {
			continue
		}
		if victim == nil || tc.since.Before(victim.since) {
			victim = tc
		}
	}
	if victim == nil {
		return false
	}
	l.log.Debug("closing idle connection to make room", "peer", victim.peer,
		"state", victim.state.String(), "for", now.Sub(victim.since))
	l.removeLocked(victim)
	// net/http's goroutine for it, blocked reading, sees the close and
	// calls Close again, which then does nothing more.
	victim.Conn.Close()
	l.metrics.ConnDropped(run.ConnReclaimed)
	return true
}

// reclaimSlowLocked makes room for a connection of peer by taking the place
// of one still receiving its request after staleNewConn, of the peer that
// holds the most connections, if that peer holds more than peer does; it
// reports whether there was one. Without it a few peers sending their
// requests slowly (each within its cap) would fill the server and keep
// every other peer out until their body timeout. The taken connection's
// read fails at once (its deadline is moved to now), its handler answers
// 408 saying why, and it closes. A request is taken only while it is
// being received, never once it runs.
func (l *connLimiter) reclaimSlowLocked(peer string, now time.Time) bool {
	var victim *trackedConn
	for tc := range l.conns {
		if !l.slowLocked(tc, peer) || now.Sub(tc.since) < staleNewConn {
			continue
		}
		if victim == nil || l.peers[tc.peer] > l.peers[victim.peer] ||
			l.peers[tc.peer] == l.peers[victim.peer] && tc.since.Before(victim.since) {
			victim = tc
		}
	}
	if victim == nil {
		return false
	}
	l.log.Debug("closing a connection still receiving its request to make room", "peer", victim.peer,
		"for", now.Sub(victim.since), "new_peer", peer)
	victim.taken = true
	l.removeLocked(victim)
	_ = victim.Conn.SetReadDeadline(now)
	l.metrics.ConnDropped(run.ConnSlowRequest)
	return true
}

// slowLocked reports whether tc is receiving its request and its peer
// holds more connections than peer: a connection reclaimSlowLocked may
// take for peer's once it has been receiving for staleNewConn.
func (l *connLimiter) slowLocked(tc *trackedConn, peer string) bool {
	return tc.state == http.StateActive && tc.receiving && l.peers[tc.peer] > l.peers[peer]
}

// waitLocked waits, with l.mu released, until a place may have freed, a
// connection becomes reclaimable for peer's, or the listener is closed.
func (l *connLimiter) waitLocked(peer string, now time.Time) error {
	wake := make(chan struct{})
	l.wake = wake
	var stale <-chan time.Time
	if at, ok := l.nextStaleLocked(peer); ok {
		t := time.NewTimer(at.Sub(now))
		defer t.Stop()
		stale = t.C
	}
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-wake:
	case <-stale:
	case <-l.done:
		return net.ErrClosed
	}
	return nil
}

// nextStaleLocked returns when the first connection in StateNew, or
// receiving a request that reclaimSlowLocked may take for peer's, becomes
// reclaimable.
func (l *connLimiter) nextStaleLocked(peer string) (time.Time, bool) {
	var at time.Time
	for tc := range l.conns {
		if (tc.state == http.StateNew || l.slowLocked(tc, peer)) && (at.IsZero() || tc.since.Before(at)) {
			at = tc.since
		}
	}
	return at.Add(staleNewConn), !at.IsZero()
}

func (l *connLimiter) removeLocked(tc *trackedConn) {
	if tc.gone {
		return
	}
	tc.gone = true
	delete(l.conns, tc)
	if l.peers[tc.peer]--; l.peers[tc.peer] == 0 {
		delete(l.peers, tc.peer)
	}
	l.wakeLocked()
}

func (l *connLimiter) wakeLocked() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

func (l *connLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// idle reports whether tc may be closed to make room.
func (tc *trackedConn) idle(now time.Time) bool {
	return tc.state == http.StateIdle || tc.state == http.StateNew && now.Sub(tc.since) >= staleNewConn
}

func (tc *trackedConn) Close() error {
	err := tc.Conn.Close()
	tc.l.mu.Lock()
	tc.l.removeLocked(tc)
	tc.l.mu.Unlock()
	return err
}

// NetConn returns the accepted connection, as tls.Conn's method of that
// name does.
func (tc *trackedConn) NetConn() net.Conn { return tc.Conn }

// trackConnState is the http.Server's ConnState hook: it tells the
// connLimiter which of its connections are idle. c may wrap a trackedConn
// (a *tls.Conn does).
func trackConnState(c net.Conn, st http.ConnState) {
	for {
		if tc, ok := c.(*trackedConn); ok {
			tc.setState(st)
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

func (tc *trackedConn) setState(st http.ConnState) {
	l := tc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.gone || st == http.StateClosed {
		return // Close did the accounting
	}
	tc.state, tc.since = st, time.Now()
	// net/http enters StateActive once a request's headers are read.
	tc.receiving = st == http.StateActive
	if st == http.StateIdle {
		l.wakeLocked()
	}
}

// received marks tc's request as received whole (its body read, or none),
// so that it is no longer reclaimSlowLocked's to take; it reports false if
// it was taken before. A nil tc (a connection Serve did not accept) has
// always received.
func (tc *trackedConn) received() bool {
	if tc == nil {
		return true
	}
	tc.l.mu.Lock()
	defer tc.l.mu.Unlock()
	tc.receiving = false
	return !tc.taken
}

// wasTaken reports whether tc was closed for another peer's connection.
func (tc *trackedConn) wasTaken() bool {
	if tc == nil {
		return false
	}
	tc.l.mu.Lock()
	defer tc.l.mu.Unlock()
	return tc.taken
}

// peerAddr is who the per-peer cap counts c against: the remote IP (an
// IPv6 /64) for TCP, else what connContext names the peer (for a unix
// socket, the uid the kernel reports).
func peerAddr(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip4 := a.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		return (&net.IPNet{IP: a.IP.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
	}
	return peerOf(c).addr
}
