package run

import (
	"context"
	"net"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/session"
)

// SessionEgress decides a new session's egress as a run's is decided
// ([EgressOptions.Grant]: the operator's allowlist, the caller's token's,
// narrowing, --egress-default) and returns what session.Options.Egress
// wants: the proxy of the session's grant (caller, front end and the
// session's id), whose final counters go to m's egress metrics when the
// session is removed. nil (and no error) means the session gets no
// network; m may be nil.
func SessionEgress(o EgressOptions, m *Metrics, want *api.Egress, caller, frontEnd string) (func(sessionID string) session.Egress, error) {
	g, err := o.Grant(want, caller)
	if err != nil || g == nil {
		return nil, err
	}
	g.FrontEnd = frontEnd
	p := o.Proxy
	return func(id string) session.Egress {
		sg := *g
		sg.SessionID = id
		return &sessionProxy{Serving: p.Start(sg), m: m}
	}, nil
}

// sessionProxy is a session's proxy, counted in the metrics once it ends.
type sessionProxy struct {
	*egress.Serving
	m *Metrics
}

func (s *sessionProxy) Serve(ctx context.Context, ln net.Listener) box.EgressUsage {
	u := s.Serving.Serve(ctx, ln)
	if s.m != nil {
		s.m.egress.observe(&u)
	}
	return u
}
