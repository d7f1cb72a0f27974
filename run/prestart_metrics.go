package run

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jaild/jaild/box"
)

// newPrestartedMetric registers jaild_runs_prestarted_total: the runs that
// a sandbox started ahead of time served (box.Result.Prestarted), one-shot
// ones from the daemon's pool (--pool) and calls in a session from the one
// their session keeps (--session-prestart). Set against jaild_runs_total it
// tells how often callers did not wait for a sandbox to be built; the first
// call in a session idle past --session-prestart-idle (dormant) is not
// counted.
func newPrestartedMetric(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "jaild", Name: "runs_prestarted_total",
		Help: `Runs served by a sandbox started ahead of time, by where it came from: "pool" (one-shot runs, --pool) or "session" (calls in a session, --session-prestart; not the first call after --session-prestart-idle).`,
	}, []string{"from"})
	reg.MustRegister(c)
	c.WithLabelValues("pool")
	c.WithLabelValues("session")
	return c
}

// observePrestarted counts res if a sandbox started ahead served it.
func (m *Metrics) observePrestarted(req Request, res *box.Result) {
	if !res.Prestarted {
		return
	}
	from := "pool"
	if req.SessionID != "" {
		from = "session"
	}
	m.prestarted.WithLabelValues(from).Inc()
}
