package server

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/run"
)

// A web page the daemon's user visits can make the browser send requests to
// a loopback port: with DNS rebinding (a name of the attacker's that first
// resolves to the attacker's server, then to 127.0.0.1) even with the
// answers readable by the page. Such a request carries the attacker's name
// in Host and, from scripts, the attacker's page in Origin. Every endpoint
// therefore refuses a Host that is not a name the daemon is known by, and an
// Origin that is not a page the operator trusts. Unix-socket peers are not
// browsers and are not checked.

// hostPolicy accepts Host headers naming loopback ("localhost" and its
// subdomains, RFC 6761), any IP literal (an IP cannot be rebound), and a
// configured list of names; "*" in the list accepts every host.
type hostPolicy struct {
	any   bool
	names []string
}

func newHostPolicy(allow []string) hostPolicy {
	var p hostPolicy
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSpace(a))
		if h, _, err := net.SplitHostPort(a); err == nil {
			a = h
		}
		switch a {
		case "":
		case "*":
			p.any = true
		default:
			p.names = append(p.names, strings.TrimSuffix(a, "."))
		}
	}
	return p
}

func (p hostPolicy) allowed(hostport string) bool {
	if p.any || hostport == "" { // no Host: HTTP/1.0, not a browser
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil {
		return true
	}
	return slices.Contains(p.names, host)
}

// originPolicy accepts requests without an Origin (non-browser clients),
// loopback origins (a page on the same machine is as trusted as the user),
// and a configured list.
type originPolicy struct{ allow []string }

func newOriginPolicy(allow []string) originPolicy {
	var p originPolicy
	for _, a := range allow {
		if a = normalizeOrigin(a); a != "" {
			p.allow = append(p.allow, a)
		}
	}
	return p
}

func normalizeOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}

func (p originPolicy) allowed(origin string) bool {
	if origin == "" {
		return true
	}
	if slices.Contains(p.allow, normalizeOrigin(origin)) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // includes "null", sent by sandboxed frames and file: pages
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkOrigin answers 403 to a request whose Host or Origin is not allowed,
// on TCP connections.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la.Network() == "unix" {
			next.ServeHTTP(w, r)
			return
		}
		var msg string
		switch {
		case !s.hosts.allowed(r.Host):
			msg = "host " + r.Host + " not allowed (the daemon answers to loopback names, IP addresses and --allowed-host)"
		case !s.origins.allowed(r.Header.Get("Origin")):
			msg = "origin " + r.Header.Get("Origin") + " not allowed (see --allowed-origin)"
		default:
			next.ServeHTTP(w, r)
			return
		}
		p := peerFromContext(r.Context(), r)
		s.log.Warn("forbidden request", "request_id", requestIDFromContext(r.Context()),
			"peer", p.addr, "host", r.Host, "origin", r.Header.Get("Origin"), "path", r.URL.Path)
		// Before authentication: the audit record names the peer
		// (auditCaller).
		s.reject(w, r, run.RejectForbidden, http.StatusForbidden, &api.ErrorResponse{Error: msg, Code: api.CodeForbidden})
	})
}
