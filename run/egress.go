package run

import (
	"context"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/jail"
)

// EgressOptions configure the chain's egress link (see [withEgress]).
type EgressOptions struct {
	// Proxy serves the runs given egress; nil means the daemon has no
	// egress, and a request asking for it is refused.
	Proxy *egress.Proxy
	// Default gives a request without an egress field the allowlist
	// (--egress-default on).
	Default bool
	// Tokens are per-token allowlists, by token name: a caller whose
	// name has one gets it instead of the daemon's.
	Tokens map[string][]egress.Pattern
}

// withEgress returns a Runner that gives each run the network its request asks
// for and the operator allows, on a copy of its spec: a request's
// egress field true means the allowlist (the caller's token's, or the
// daemon's), false none, a list that list, which may only narrow the
// allowlist. A request that asks for egress the daemon cannot give is
// refused with an InvalidError naming the field, never run without it.
func withEgress(next Runner, o EgressOptions) Runner {
	return &egressLink{next: next, o: o}
}

type egressLink struct {
	next Runner
	o    EgressOptions
}

// Grant decides what a request's (or a session's) egress field gives
// caller, with the rules of [withEgress]: nil (and no error) means no network;
// an ask the daemon cannot give is an InvalidError naming the field. The
// grant's who-asked fields other than Caller are the caller's to fill.
func (o EgressOptions) Grant(want *api.Egress, caller string) (*egress.Grant, error) {
	if want == nil && o.Default && o.Proxy != nil {
		want = &api.Egress{Allowed: true}
	}
	if want == nil || !want.Allowed {
		return nil, nil
	}
	if o.Proxy == nil {
		return nil, &box.InvalidError{Field: "egress", Reason: "this daemon gives no network access (the operator has not set --egress-allow)"}
	}
	base := o.Tokens[caller] // nil: the daemon's list
	if len(base) == 0 && len(o.Proxy.Allow()) == 0 {
		return nil, &box.InvalidError{Field: "egress", Reason: "no destination is allowed for this caller (the operator's allowlist is empty)"}
	}
	g := &egress.Grant{Base: base, Caller: caller}
	if want.Hosts != nil {
		hosts, err := o.Proxy.Narrow(base, want.Hosts)
		if err != nil {
			return nil, &box.InvalidError{Field: "egress", Reason: err.Error()}
		}
		g.Hosts = hosts
	}
	return g, nil
}

func (e *egressLink) Run(ctx context.Context, req Request) (*box.Result, error) {
	req, err := e.grant(req, false)
	if err != nil {
		return nil, err
	}
	return e.next.Run(ctx, req)
}

func (e *egressLink) Start(ctx context.Context, req Request) (string, error) {
	req, err := e.grant(req, true)
	if err != nil {
		return "", err
	}
	return e.next.Start(ctx, req)
}

// grant returns req as the rest of the chain runs it: with a Spec of its
// own that has the egress granted, if any is.
func (e *egressLink) grant(req Request, background bool) (Request, error) {
	want := req.Egress
	if req.SessionID != "" || background {
		// A session's sandboxes share its network namespace, whose
		// egress was decided when the session was created
		// (SessionEgress): an explicit ask is refused, --egress-default
		// does not apply.
		if want != nil && want.Allowed {
			return req, &box.InvalidError{Field: "egress", Reason: "a session's egress is set when the session is created (POST /sessions with \"egress\"), not per call"}
		}
		return req, nil
	}
	g, err := e.o.Grant(want, req.Caller)
	if err != nil || g == nil {
		return req, err
	}
	g.RequestID, g.FrontEnd, g.Command = req.RequestID, req.FrontEnd, req.Shell
	if g.Command == "" {
		g.Command = strings.Join(req.Spec.Args, " ")
	}
	spec := *req.Spec
	p := e.o.Proxy
	spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage {
		return p.Serve(ctx, ln, *g)
	}}
	req.Spec = &spec
	return req, nil
}

// Egress writes the audit line of one egress decision.
func (l *AuditLog) Egress(d egress.Decision) {
	if l == nil {
		return
	}
	rec := &api.EgressRecord{
		Time: d.Time, Verdict: api.VerdictEgressAllowed, Reason: d.Reason,
		Host: d.Host, Port: d.Port, Addr: d.Addr,
	}
	if d.Grant != nil {
		rec.Caller, rec.RequestID, rec.SessionID = d.Grant.Caller, d.Grant.RequestID, d.Grant.SessionID
	}
	if !d.Allowed {
		rec.Verdict = api.VerdictEgressDenied
	}
	l.writeLine(rec)
}

// egressMetrics count what the runs' proxies moved and decided.
type egressMetrics struct {
	bytes *prometheus.CounterVec
	conns *prometheus.CounterVec
}

func newEgressMetrics(reg *prometheus.Registry) *egressMetrics {
	m := &egressMetrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "egress_bytes_total",
			Help: "Bytes moved by the egress proxy, by direction (in: from upstreams to sandboxes).",
		}, []string{"direction"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "egress_connections_total",
			Help: "Connections sandboxes asked the egress proxy for, by result (allowed, denied).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.bytes, m.conns)
	for _, d := range []string{"in", "out"} {
		m.bytes.WithLabelValues(d)
	}
	for _, r := range []string{"allowed", "denied"} {
		m.conns.WithLabelValues(r)
	}
	return m
}

func (m *egressMetrics) observe(u *box.EgressUsage) {
	if m == nil || u == nil {
		return
	}
	m.bytes.WithLabelValues("in").Add(float64(u.BytesIn))
	m.bytes.WithLabelValues("out").Add(float64(u.BytesOut))
	m.conns.WithLabelValues("allowed").Add(float64(u.Connections))
	m.conns.WithLabelValues("denied").Add(float64(u.Denied))
}
