package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/jaild/jaild/caller"
)

// A daemon in a fleet: behind a load balancer (whose address every
// connection comes from) and beside peers that forward it the requests
// of its sessions (see package route). Two things follow: requests are
// routed to their session's daemon (Options.Fleet), and the caller's
// address is taken from a trusted proxy's X-Forwarded-For or a peer's
// forwarded header rather than from the connection.

// routed is next behind the fleet's router, if there is one.
func (s *Server) routed(next http.Handler) http.Handler {
	if s.opts.Fleet == nil {
		return next
	}
	return s.opts.Fleet.Handler(next, func(r *http.Request) string { return peerFromContext(r.Context(), r).addr })
}

// realPeer replaces the connection's peer, for the request, by the caller
// it acts for: the address a daemon of the fleet vouches for in its
// forwarded header, or, from a trusted proxy, the rightmost address of
// X-Forwarded-For that is not a trusted proxy's (the ones left of it are
// the caller's to write). Owners of sessions without tokens, per-caller
// quotas and audit records then name the caller, not the balancer.
func (s *Server) realPeer(next http.Handler) http.Handler {
	if s.opts.Fleet == nil && len(s.opts.TrustedProxies) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if s.opts.Fleet != nil {
			if a, ok := s.opts.Fleet.ForwardedPeer(r); ok {
				next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, peerKey{}, remotePeer(a))))
				return
			}
		}
		if a, ok := forwardedFor(peerFromContext(ctx, r).addr, r.Header.Values("X-Forwarded-For"), s.opts.TrustedProxies); ok {
			ctx = context.WithValue(ctx, peerKey{}, remotePeer(a))
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// remotePeer is the peer a proxy or a daemon of the fleet names by its
// address (with or without a port). Only an IP address names a caller: a
// unix socket's uid is a user of another host, the same number naming
// nobody here, so such a peer is unidentified (and, without tokens, let in
// by nothing).
func remotePeer(addr string) peer {
	if _, err := netip.ParseAddrPort(addr); err == nil {
		return addrPeer(addr)
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return peer{addr: addr, id: caller.FromAddr(a.Unmap().WithZone("").String())}
	}
	return peer{addr: "forwarded " + addr}
}

// forwardedFor is the caller behind a chain of trusted proxies: walking
// X-Forwarded-For from the right, starting at the connection's peer, the
// first address that is not a trusted proxy. ok is false when the peer is
// not a trusted proxy (its X-Forwarded-For is the caller's to forge), or the
// header holds nothing usable.
func forwardedFor(peer string, xff []string, trusted []netip.Prefix) (string, bool) {
	if len(trusted) == 0 {
		return "", false
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !isTrusted(ip, trusted) {
		return "", false
	}
	var hops []string
	for _, v := range xff {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return "", false // garbage in the chain: trust none of it
		}
		a = a.Unmap()
		if !isTrusted(a, trusted) {
			return a.String(), true
		}
	}
	return "", false
}

func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	ip = ip.Unmap()
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
