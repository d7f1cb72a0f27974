package server

import (
	"context"
	"net/http"
	"time"

	"github.com/jaild/jaild/jail"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reasons of the rejected_total metric.
const (
	rejectBusy         = "busy"
	rejectInvalid      = "invalid"
	rejectBadJSON      = "bad_json"
	rejectTooLarge     = "too_large"
	rejectMedia        = "unsupported_media_type"
	rejectBodyTimeout  = "body_timeout"
	rejectUnauthorized = "unauthorized"
	rejectShutdown     = "shutting_down"
)

// Reasons of the connections_closed_total metric.
const (
	connReclaimed = "reclaimed_idle" // an idle connection closed to make room
	connPeerLimit = "peer_limit"     // a new connection of a peer at its cap
)

// Metrics are the daemon's Prometheus metrics, in a registry of their own:
// the global one would collect whatever any imported package registers, and
// would make two servers in one test process collide. A nil *Metrics is
// valid and records nothing.
type Metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	duration prometheus.Histogram
	cpu      prometheus.Histogram
	wait     prometheus.Histogram
	running  prometheus.Gauge
	rejects  *prometheus.CounterVec
	conns    *prometheus.CounterVec
}

// NewMetrics creates the metrics and their registry, with the Go runtime
// and process collectors. It is called once per server, never at package
// init: the jaild binary re-execs itself for every sandbox.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "runs_total",
			Help: "Runs that reached the jail or were refused by admission control, by verdict.",
		}, []string{"verdict"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "jaild", Name: "run_duration_seconds",
			Help:    "Wall-clock time of runs in the jail, sandbox setup and teardown included.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}),
		cpu: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "jaild", Name: "run_cpu_seconds",
			Help:    "CPU time used by the commands of runs.",
			Buckets: []float64{.001, .01, .05, .1, .5, 1, 5, 10, 60, 300},
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "jaild", Name: "admission_wait_seconds",
			Help:    "Time admitted runs spent queued before they got a slot.",
			Buckets: []float64{.001, .01, .05, .1, .5, 1, 2.5, 5, 10, 30},
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "sandboxes_running",
			Help: "Runs currently in the jail.",
		}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "requests_rejected_total",
			Help: "Requests refused before a sandbox was built, by reason.",
		}, []string{"reason"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "connections_closed_total",
			Help: "Connections the server closed to bound them (--max-conns, --max-conns-per-peer), by reason.",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.runs, m.duration, m.cpu, m.wait, m.running, m.rejects, m.conns,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Pre-create the label values so that dashboards and alerts see zeros
	// rather than absent series.
	for _, v := range []string{VerdictOK, VerdictExitNonzero, VerdictSignaled, VerdictTimedOut,
		VerdictOOMKilled, VerdictPidsLimit, VerdictCanceled, VerdictBusy, VerdictNotFound,
		VerdictNotExecutable, VerdictError} {
		m.runs.WithLabelValues(v)
	}
	for _, r := range []string{rejectBusy, rejectInvalid, rejectBadJSON, rejectTooLarge, rejectMedia,
		rejectBodyTimeout, rejectUnauthorized, rejectShutdown} {
		m.rejects.WithLabelValues(r)
	}
	m.conns.WithLabelValues(connReclaimed)
	m.conns.WithLabelValues(connPeerLimit)
	return m
}

// Registry is where the metrics live, for callers that add their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *Metrics) rejected(reason string) {
	if m == nil {
		return
	}
	m.rejects.WithLabelValues(reason).Inc()
	if reason == rejectBusy {
		m.runs.WithLabelValues(VerdictBusy).Inc()
	}
}

func (m *Metrics) connDropped(reason string) {
	if m == nil {
		return
	}
	m.conns.WithLabelValues(reason).Inc()
}

func (m *Metrics) waited(d time.Duration) {
	if m == nil {
		return
	}
	m.wait.Observe(d.Seconds())
}

// observeAdmitter exports a's queue depth and slot use. They are read at
// scrape time from the admitter itself, so they cannot drift from it.
func (m *Metrics) observeAdmitter(a *Admitter) {
	if m == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "queue_depth",
			Help: "Runs waiting for an admission slot.",
		}, func() float64 { return float64(a.Queued()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "admission_slots_used",
			Help: "Admission slots held, by runs in the jail or about to enter it.",
		}, func() float64 { return float64(a.Running()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "admission_slots",
			Help: "Maximum of concurrent sandboxes.",
		}, func() float64 { return float64(cap(a.slots)) }),
	)
}

// Instrument returns a Runner that records every run of r in m: the
// running gauge, and per finished run its verdict, duration and CPU time.
// It belongs next to the jail, inside admission control, so that it counts
// only runs that really reached the jail.
func Instrument(r Runner, m *Metrics) Runner {
	if m == nil {
		return r
	}
	return &instrumented{next: r, m: m}
}

type instrumented struct {
	next Runner
	m    *Metrics
}

func (i *instrumented) Run(ctx context.Context, spec *jail.Spec) (*jail.Result, error) {
	i.m.running.Inc()
	defer i.m.running.Dec()
	res, err := i.next.Run(ctx, spec)
	i.m.runs.WithLabelValues(verdict(res, err)).Inc()
	if res != nil {
		i.m.duration.Observe(res.Duration.Seconds())
		i.m.cpu.Observe(res.CPUTime.Seconds())
	}
	return res, err
}
