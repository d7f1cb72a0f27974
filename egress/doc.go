// Package egress is jaild's egress proxy: the only way out of a sandbox
// given network access, deciding every connection by host name and port.
//
// A sandbox given egress (jail.Egress) has a network namespace with only
// loopback, no route and no resolver, and a listener on its
// 127.0.0.1:3128 that jaild serves from outside with [Proxy.Serve]. The
// sandbox's HTTP_PROXY, HTTPS_PROXY and ALL_PROXY point there. The proxy
// speaks HTTP CONNECT (any TCP, HTTPS included, tunnelled as it is: no TLS
// interception) and plain-HTTP forwarding of absolute-URI requests
// (hop-by-hop headers dropped, redirects not followed: the client's next
// request is a new connection, decided again). SOCKS5 is not served: no
// maintained Go library makes it cheap next to what net/http gives, and the
// tools agents run (curl, pip, git, npm, Python's urllib) all speak
// HTTP proxies.
//
// # Why net/http and not a proxy library
//
// net/http's server already parses CONNECT requests and absolute-URI
// requests, and httputil.ReverseProxy forwards a request with the
// hop-by-hop headers removed and without following redirects. What is
// left for this package is the decision and the dialing, which a library
// such as elazarl/goproxy would not do for us either (its value is TLS
// interception, which jaild deliberately does not do). No new module.
//
// # The decision, per connection
//
//  1. The target must be a host name or an IP address and a port: anything
//     else is refused before any lookup.
//  2. It must match the allowlist: the daemon's (--egress-allow) or, for a
//     caller whose token has one, the token's; and, if the request gave a
//     list, that list too (a request may only narrow).
//  3. If a policy is loaded, Rego's data.sandbox.network.allow must be true
//     (an error or an undefined rule refuses).
//  4. The connection and byte caps of the run must not be reached.
//  5. Only now is the name resolved (a refused name is never looked up, so
//     a name made of a secret leaks nothing to any resolver), and every
//     address it resolves to is checked: loopback, private, CGNAT,
//     link-local (169.254.169.254), unique-local, multicast, broadcast,
//     unspecified and the host's own addresses are refused, and so is every
//     IPv6 form that embeds one (IPv4-compatible, -mapped and -translated,
//     NAT64; 6to4, Teredo and local-use NAT64 whole), unless the
//     operator named that address (--egress-allow 10.1.2.3:443) or a range
//     holding it (--egress-allow-cidr). The proxy dials the checked address
//     itself, never the name again, so a second answer (DNS rebinding)
//     cannot change where the connection goes; the dialer's control hook
//     checks the address once more on the socket.
//
// A refused connection gets HTTP 403 with a one-line reason and the
// header X-Jaild-Egress: refused; every decision goes to
// [Config.OnDecision] (the audit log). A run's counters (bytes each way,
// connections, refusals) are what Serve returns, which the jail puts in the
// run's result.
package egress
