package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jaild/jaild/box"
)

// Defaults of a [Config] whose fields are left zero.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultResolveTimeout = 5 * time.Second
)

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Hosts is a Resolver from a fixed table (name -> addresses), like curl's
// --resolve: a name in it is never looked up elsewhere. Names not in it go
// to Next, or fail if Next is nil.
type Hosts struct {
	Table map[string][]netip.Addr
	Next  Resolver
}

// LookupNetIP implements Resolver.
func (h *Hosts) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if addrs, ok := h.Table[host]; ok {
		return slices.Clone(addrs), nil
	}
	if h.Next == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return h.Next.LookupNetIP(ctx, network, host)
}

// Policy is a second opinion on each connection that the allowlists let
// through: the operator's Rego (package policy). An error refuses.
type Policy interface {
	AllowNetwork(ctx context.Context, q Query) (bool, error)
}

// Query is what the Policy is asked about one connection.
type Query struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Caller    string `json:"caller"`
	Command   string `json:"command"`
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
	FrontEnd  string `json:"front_end"`
}

// Config is the operator's egress configuration. The zero value lets
// nothing out.
type Config struct {
	// Allow is the daemon's allowlist: what a run given egress may
	// reach, unless its token has a list of its own (Grant.Base).
	Allow []Pattern
	// AllowCIDR are ranges the operator names explicitly: addresses in
	// them are dialed even if they are loopback, private or link-local.
	// A connection still needs a pattern of the allowlist to match.
	AllowCIDR []netip.Prefix
	// Resolver looks allowed names up; nil means the host's resolver.
	Resolver Resolver
	// MaxBytes caps the bytes a run may move (in plus out); zero means
	// no cap. MaxConns caps its connections; zero means no cap.
	MaxBytes int64
	MaxConns int64
	// DialTimeout bounds each connection to an upstream; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Policy, if not nil, is asked about every connection the
	// allowlists let through.
	Policy Policy
	// OnDecision, if not nil, receives every decision (the audit log).
	OnDecision func(Decision)
	// Logger receives debug messages; nil discards them.
	Logger *slog.Logger
}

// Decision is one connection asked for by a sandbox and what became of it.
type Decision struct {
	Time    time.Time
	Grant   *Grant
	Host    string
	Port    int
	Addr    string // the address dialed; empty if refused before
	Allowed bool
	Reason  string // why it was refused
}

// Proxy is the daemon's egress proxy: the configuration it serves every
// run's listener with. It is safe for concurrent use.
type Proxy struct {
	cfg Config
	own ownAddrs
	log *slog.Logger
}

// New returns a Proxy for cfg.
func New(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{cfg: cfg, log: cfg.Logger}
}

// Allow is the daemon's allowlist.
func (p *Proxy) Allow() []Pattern { return p.cfg.Allow }

// Grant is what one run may reach, and who asked (for the policy and the
// audit log).
type Grant struct {
	// Base replaces the daemon's allowlist for this run when not nil:
	// the caller's token's own list.
	Base []Pattern
	// Hosts, when not nil, narrows the list (Base or the daemon's): a
	// connection must match both.
	Hosts []Pattern

	Caller, RequestID, Command, SessionID, FrontEnd string
}

// Narrow checks that a request's patterns only narrow what base (nil: the
// daemon's list) allows, and returns them.
func (p *Proxy) Narrow(base []Pattern, hosts []string) ([]Pattern, error) {
	if base == nil {
		base = p.cfg.Allow
	}
	pats, err := ParsePatterns(hosts)
	if err != nil {
		return nil, err
	}
	for _, q := range pats {
		if !slices.ContainsFunc(base, func(b Pattern) bool { return b.Covers(q) }) {
			return nil, fmt.Errorf("egress pattern %s is not within the operator's allowlist", q)
		}
	}
	if pats == nil {
		pats = []Pattern{}
	}
	return pats, nil
}

// decide judges one connection to hostport (as CONNECT or a URL gives it,
// with defPort if it has none) and, if it is allowed, resolves it: the
// addresses returned are the only ones that may be dialed. A name is
// looked up only once the allowlists and the policy let it through, so
// that a refused name leaks nothing to any resolver.
func (r *runState) decide(ctx context.Context, hostport string, defPort int) (host string, port int, addrs []netip.Addr, err error) {
	h, ps, ok := cutHostPort(hostport)
	if !ok {
		h, ps = hostport, strconv.Itoa(defPort)
	}
	port, perr := strconv.Atoi(ps)
	name, ip, ok := normalize(h)
	if !ok || perr != nil || port < 1 || port > 65535 {
		return h, port, nil, &Denied{Host: h, Port: port, Err: ErrBadTarget, Reason: fmt.Sprintf("%q is not a host:port jaild can connect to", hostport)}
	}
	deny := func(sentinel error, format string, args ...any) error {
		return &Denied{Host: name, Port: port, Err: sentinel, Reason: fmt.Sprintf("%s:%d ", name, port) + fmt.Sprintf(format, args...)}
	}
	base := r.g.Base
	if base == nil {
		base = r.p.cfg.Allow
	}
	switch {
	case !matchAny(base, name, port):
		return name, port, nil, deny(ErrNotAllowed, "is not in the egress allowlist")
	case r.g.Hosts != nil && !matchAny(r.g.Hosts, name, port):
		return name, port, nil, deny(ErrNotAllowed, "is not in this request's egress list")
	}
	if pol := r.p.cfg.Policy; pol != nil {
		ok, err := pol.AllowNetwork(ctx, Query{
			Host: name, Port: port, Caller: r.g.Caller, Command: r.g.Command,
			SessionID: r.g.SessionID, RequestID: r.g.RequestID, FrontEnd: r.g.FrontEnd,
		})
		switch {
		case err != nil:
			return name, port, nil, deny(ErrPolicy, "was refused: the policy failed: %v", err)
		case !ok:
			return name, port, nil, deny(ErrPolicy, "is refused by the policy")
		}
	}
	if n := r.conns.Add(1); r.p.cfg.MaxConns > 0 && n > r.p.cfg.MaxConns {
		return name, port, nil, deny(ErrCap, "refused: the run's cap of %d connections is reached", r.p.cfg.MaxConns)
	}
	if max := r.p.cfg.MaxBytes; max > 0 && r.bytesIn.Load()+r.bytesOut.Load() >= max {
		return name, port, nil, deny(ErrCap, "refused: the run's cap of %d bytes is reached", max)
	}
	if ip.IsValid() {
		addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, DefaultResolveTimeout)
		addrs, err = r.p.cfg.Resolver.LookupNetIP(lctx, "ip", name)
		cancel()
		if err != nil || len(addrs) == 0 {
			return name, port, nil, deny(ErrResolve, "could not be resolved")
		}
	}
	// Checked after resolution, on the addresses that will be dialed:
	// a name an attacker controls may resolve anywhere.
	var why string
	dialable := addrs[:0:0]
	for _, a := range addrs {
		a = a.Unmap()
		if w := r.refusedWhy(a, port); w != "" {
			why = fmt.Sprintf("%s is %s", a, w)
			continue
		}
		dialable = append(dialable, a)
	}
	if len(dialable) == 0 {
		return name, port, nil, deny(ErrAddress, "is refused: %s", why)
	}
	return name, port, dialable, nil
}

// refusedWhy says why the proxy will not dial ip:port for this run, or ""
// if it may: the operator may name an address that is refused by default,
// in the run's allowlist (the daemon's or the token's) or --egress-allow-cidr.
func (r *runState) refusedWhy(ip netip.Addr, port int) string {
	p := r.p
	base := r.g.Base
	if base == nil {
		base = p.cfg.Allow
	}
	if namesIP(base, ip, port) {
		return ""
	}
	for _, c := range p.cfg.AllowCIDR {
		if c.Contains(ip) {
			return ""
		}
	}
	return refusedWhy(ip, &p.own)
}

// dial connects to the first of addrs that answers. The control hook
// checks the address again on the socket itself, as a last guard.
func (r *runState) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	d := net.Dialer{
		Timeout: r.p.cfg.DialTimeout,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if why := r.refusedWhy(ap.Addr().Unmap(), int(ap.Port())); why != "" {
				return fmt.Errorf("%w: %s is %s", ErrAddress, ap.Addr(), why)
			}
			return nil
		},
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return &countedConn{Conn: c, r: r}, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// usage is the run's counters as the jail reports them.
func (r *runState) usage() box.EgressUsage {
	return box.EgressUsage{
		BytesIn: r.bytesIn.Load(), BytesOut: r.bytesOut.Load(),
		Connections: r.allowed.Load(), Denied: r.denied.Load(),
	}
}

// record counts a decision and hands it to OnDecision.
func (r *runState) record(host string, port int, addr string, err error) {
	d := Decision{Time: time.Now(), Grant: &r.g, Host: host, Port: port, Addr: addr, Allowed: err == nil}
	if err != nil {
		r.denied.Add(1)
		d.Reason = err.Error()
		if de := (*Denied)(nil); errors.As(err, &de) {
			d.Reason = de.Reason
		}
	} else {
		r.allowed.Add(1)
	}
	r.p.log.Debug("egress", "host", host, "port", port, "addr", addr, "allowed", d.Allowed, "reason", d.Reason, "caller", r.g.Caller)
	if r.p.cfg.OnDecision != nil {
		r.p.cfg.OnDecision(d)
	}
}
