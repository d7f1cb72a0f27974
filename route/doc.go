// Package route lets many jaild daemons behind one URL keep every session's
// state: the session lives on the daemon that created it, and every daemon
// sends a request for a session to that daemon.
//
// No catalog says where a session lives: its id does. With a fleet key
// (a secret every daemon of the fleet shares) each daemon mints session
// and MCP session ids that begin with a route token,
//
//	base64url(version | IP (4 or 16 bytes) | port | instance | MAC) "." uuid
//
// naming the address peers reach it at (its advertise address), an
// instance id drawn at each start, and an HMAC-SHA256 of those under the
// fleet key. [Router.Handler] reads the id of each request (the
// /sessions/{id} path, the session_id of a POST /run or /raw body, the
// Mcp-Session-Id header) and serves it locally when the token names this
// daemon's instance, or sends it once to the daemon it names.
//
// A daemon signs with one fleet key and may accept others besides it
// (Config.AcceptKeys, Router.SetKeys): a token or forwarded header holds if
// its MAC verifies under any of them. That is how a fleet rotates its key
// without a session failing its check: every daemon first accepts the new
// key, then signs with it while accepting the old one, and drops the old
// one once the ids minted under it are gone (docs/fleet.md).
//
// The MAC is what keeps forwarding from being a way to make a root daemon
// connect to any address a caller chooses: a token whose MAC fails is never
// followed (the request is served locally, where the id is unknown: 404).
// A request that the named daemon cannot take (it is unreachable, or
// another instance answers at its address: the daemon restarted) is
// answered 410 session_lost, so that a caller learns its workspace is gone
// instead of finding an empty one.
//
// A forwarded request carries a header MACed under the same key (the
// original peer, the time, the request line). A daemon never forwards a
// request bearing a valid one, which bounds every request to one hop.
package route
