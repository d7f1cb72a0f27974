package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/run"
	"golang.org/x/sys/unix"
)

// Tokens is a set of named bearer tokens, loaded from a token file:
//
//	# comment
//	alice:Zm9vYmFyYmF6cXV4cXV1eA
//	ci-runner:8c5a7b...
//
// one NAME:TOKEN per line. Names are 1-64 of [A-Za-z0-9_.@-]; tokens are at
// least 16 of [A-Za-z0-9._~+/=-] (no colon, so NAME:TOKEN is unambiguous).
// The name is the caller's identity in the audit log; the token never
// appears anywhere but in this file.
type Tokens struct {
	names  []string
	hashes [][sha256.Size]byte
}

// MinTokenLen is the shortest token a token file may hold.
const MinTokenLen = 16

// validName and validToken check the token file's character sets by hand:
// a package-level regexp would be compiled at init in every sandbox, since
// the jaild binary re-execs itself as each sandbox's init.
func validName(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && onlyChars(s, "_.@-")
}

func validToken(s string) bool {
	return len(s) >= MinTokenLen && onlyChars(s, "._~+/=-")
}

// onlyChars reports whether s holds only ASCII letters, digits and extra.
func onlyChars(s, extra string) bool {
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// LoadTokens reads a token file. It refuses a file that other users may
// read or write: whoever can read it can run commands as root's sandboxes.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("load tokens: %s has mode %#o, open to other users; chmod o-rwx it", path, perm)
	}
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("load tokens from %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads NAME:TOKEN lines; see [Tokens]. An empty set is an
// error: a daemon started with a token file must not quietly accept nobody
// (or, worse, be taken as running without auth).
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seenName := map[string]bool{}
	seenToken := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: not NAME:TOKEN", n)
		case !validName(name):
			return nil, fmt.Errorf("line %d: bad name %q", n, name)
		case !validToken(tok):
			// Never echo the token itself.
			return nil, fmt.Errorf("line %d (%s): token must be at least %d of [A-Za-z0-9._~+/=-]", n, name, MinTokenLen)
		case seenName[name]:
			return nil, fmt.Errorf("line %d: duplicate name %q", n, name)
		}
		h := sha256.Sum256([]byte(tok))
		if seenToken[h] {
			return nil, fmt.Errorf("line %d (%s): token already used by another name", n, name)
		}
		seenName[name], seenToken[h] = true, true
		t.names = append(t.names, name)
		t.hashes = append(t.hashes, h)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.names) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return t, nil
}

// Lookup returns the name of token. It compares SHA-256 hashes, in constant
// time, against every token without stopping at a match, so that neither
// the time taken nor its dependence on length tells a caller how close a
// guess came.
func (t *Tokens) Lookup(token string) (name string, ok bool) {
	h := sha256.Sum256([]byte(token))
	match := -1
	for i := range t.hashes {
		if subtle.ConstantTimeCompare(h[:], t.hashes[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return t.names[match], true
}

type callerKey struct{}

// withCaller returns ctx carrying the caller's identity: a token's, or the
// peer's when the daemon runs without tokens.
func withCaller(ctx context.Context, id caller.ID) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// CallerFromContext returns the caller the daemon authenticated for a
// request, for handlers mounted at Options.MCP: a token's name, or the
// peer (a unix socket's uid, a TCP peer's address). The zero ID if none.
func CallerFromContext(ctx context.Context) caller.ID {
	id, _ := ctx.Value(callerKey{}).(caller.ID)
	return id
}

type requestIDKey struct{}

// withRequestID returns ctx carrying the id of the HTTP request it serves.
func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

func requestIDFromContext(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}

type peerKey struct{}

// peer is who is at the other end of a connection.
type peer struct {
	// addr names it in logs and in the per-peer connection cap: the
	// remote address with its port, or "uid:N" for a unix socket.
	addr string
	// id is the caller it is when it shows no token: a unix socket's
	// uid, or a TCP peer's IP address without the port (a port names one
	// connection, not a caller: with it every new connection would be a
	// stranger to the sessions its caller made). Zero if unknown.
	id caller.ID
}

// connContext records who is at the other end of a connection, once per
// connection: for a unix socket the peer's uid from SO_PEERCRED (the kernel
// vouches for it), else the remote address.
func connContext(ctx context.Context, c net.Conn) context.Context {
	ctx = context.WithValue(ctx, peerKey{}, peerOf(c))
	for {
		if tc, ok := c.(*trackedConn); ok {
			return context.WithValue(ctx, connKey{}, tc)
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = u.NetConn()
	}
}

// connKey holds the *trackedConn of a connection Serve accepted.
type connKey struct{}

func peerOf(c net.Conn) peer {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return addrPeer(c.RemoteAddr().String())
	}
	p := peer{addr: "unix"}
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				p.id = caller.FromUID(cred.Uid)
				p.addr = p.id.String()
			}
		})
	}
	return p
}

// addrPeer is the peer at a TCP remote address; an IPv4 peer of a
// dual-stack listener is the same caller as on an IPv4 one.
func addrPeer(addr string) peer {
	p := peer{addr: addr}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		p.id = caller.FromAddr(ap.Addr().Unmap().WithZone("").String())
	}
	return p
}

func peerFromContext(ctx context.Context, r *http.Request) peer {
	if p, ok := ctx.Value(peerKey{}).(peer); ok {
		return p
	}
	return addrPeer(r.RemoteAddr)
}

// authenticate puts the caller into the request context, or answers 401.
// With no tokens every caller is let in and named after its peer: the
// listener is then loopback or a unix socket (serve enforces that), and the
// socket's mode is the access control.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		p := peerFromContext(ctx, r)
		if s.opts.Tokens == nil {
			if p.id.IsZero() {
				// Callers are told apart by their peer: one the
				// kernel would not name must not share an identity
				// (and sessions) with every other such peer.
				s.log.Warn("request from an unidentified peer", "request_id", requestIDFromContext(ctx),
					"peer", p.addr, "path", r.URL.Path)
				s.reject(w, r, run.RejectUnauthorized, http.StatusUnauthorized,
					&api.ErrorResponse{Error: "unauthorized", Code: api.CodeUnauthorized})
				return
			}
			next.ServeHTTP(w, r.WithContext(withCaller(ctx, p.id)))
			return
		}
		name, ok := s.opts.Tokens.Lookup(bearer(r))
		if !ok {
			s.log.Warn("unauthorized request", "request_id", requestIDFromContext(ctx),
				"peer", p.addr, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="jaild"`)
			// reject closes the connection: a caller without a token
			// gets no keep-alive connection, which idle would hold one of
			// the --max-conns places. No detail: whether the header was
			// missing, malformed or wrong is nobody's business but the
			// log's. The audit record names the peer (auditCaller).
			s.reject(w, r, run.RejectUnauthorized,
				http.StatusUnauthorized, &api.ErrorResponse{Error: "unauthorized", Code: api.CodeUnauthorized})
			return
		}
		next.ServeHTTP(w, r.WithContext(withCaller(ctx, caller.FromToken(name))))
	})
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header, or "".
func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}
