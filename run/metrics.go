package run

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reasons of the requests_rejected_total metric and of audit records of
// requests refused before they became runs.
const (
	RejectBusy         = "busy"
	RejectInvalid      = "invalid"
	RejectBadJSON      = "bad_json"
	RejectTooLarge     = "too_large"
	RejectMedia        = "unsupported_media_type"
	RejectBodyTimeout  = "body_timeout"
	RejectUnauthorized = "unauthorized"
	RejectShutdown     = "shutting_down"
	RejectDraining     = "draining"
	RejectForbidden    = "forbidden"
)

// Reasons of the connections_closed_total metric.
const (
	ConnReclaimed = "reclaimed_idle" // an idle connection closed to make room
	ConnPeerLimit = "peer_limit"     // a new connection of a peer at its cap
	// ConnSlowRequest: a connection still receiving its request, of
	// the peer holding the most, closed to make room for another peer.
	ConnSlowRequest = "reclaimed_receiving"
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
	gaveUp   prometheus.Counter
	conns    *prometheus.CounterVec
	// prestarted counts runs a sandbox started ahead served (see
	// prestart_metrics.go).
	prestarted *prometheus.CounterVec

	policyOnce sync.Once
	policy     *policyMetrics // see PolicyObserver
	egress     *egressMetrics
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
		gaveUp: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "jaild", Name: "queue_abandoned_total",
			Help: "Runs whose caller went away while they waited in the admission queue.",
		}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "jaild", Name: "connections_closed_total",
			Help: "Connections the server closed to bound them (--max-conns, --max-conns-per-peer), by reason.",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.runs, m.duration, m.cpu, m.wait, m.running, m.rejects, m.gaveUp, m.conns,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Pre-create the label values so that dashboards and alerts see zeros
	// rather than absent series.
	for _, v := range []string{api.VerdictOK, api.VerdictExitNonzero, api.VerdictSignaled, api.VerdictTimedOut,
		api.VerdictOOMKilled, api.VerdictPidsLimit, api.VerdictCanceled, api.VerdictBusy, api.VerdictNotFound,
		api.VerdictNotExecutable, api.VerdictError} {
		m.runs.WithLabelValues(v)
	}
	for _, r := range []string{RejectBusy, RejectInvalid, RejectBadJSON, RejectTooLarge, RejectMedia,
		RejectBodyTimeout, RejectUnauthorized, RejectShutdown, RejectDraining, RejectForbidden} {
		m.rejects.WithLabelValues(r)
	}
	m.egress = newEgressMetrics(m.reg)
	m.prestarted = newPrestartedMetric(m.reg)
	m.conns.WithLabelValues(ConnReclaimed)
	m.conns.WithLabelValues(ConnPeerLimit)
	m.conns.WithLabelValues(ConnSlowRequest)
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Rejected counts a request refused before it became a run.
func (m *Metrics) Rejected(reason string) {
	if m == nil {
		return
	}
	m.rejects.WithLabelValues(reason).Inc()
	if reason == RejectBusy {
		m.runs.WithLabelValues(api.VerdictBusy).Inc()
	}
}

func (m *Metrics) abandoned() {
	if m == nil {
		return
	}
	m.gaveUp.Inc()
}

// ConnDropped counts a connection the server closed to bound them.
func (m *Metrics) ConnDropped(reason string) {
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "output_memory_held_bytes",
			Help: "Output memory reserved by admitted runs (twice their max output) until their results are written.",
		}, func() float64 { h, _ := a.OutputMemory(); return float64(h) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "output_memory_bytes",
			Help: "Bound of the output memory of all admitted runs (--max-output-memory).",
		}, func() float64 { _, m := a.OutputMemory(); return float64(m) }),
	)
}

// instrument returns a Runner that records every run of r in m: the
// running gauge, and per finished run its verdict, duration and CPU time.
// It belongs next to the jail, inside admission control, so that it counts
// only runs that really reached the jail.
func instrument(r Runner, m *Metrics) Runner {
	if m == nil {
		return r
	}
	return &instrumented{next: r, m: m}
}

type instrumented struct {
	next Runner
	m    *Metrics
}

func (i *instrumented) Run(ctx context.Context, req Request) (*box.Result, error) {
	i.m.running.Inc()
	defer i.m.running.Dec()
	res, err := i.next.Run(ctx, req)
	i.m.runs.WithLabelValues(verdict(res, err)).Inc()
	if res != nil {
		i.m.duration.Observe(res.Duration.Seconds())
		i.m.cpu.Observe(res.CPUTime.Seconds())
		i.m.egress.observe(res.Egress)
		i.m.observePrestarted(req, res)
	}
	return res, err
}

// Start counts a background start by its verdict: "started", or its
// refusal's. The job's own end is the session's.
func (i *instrumented) Start(ctx context.Context, req Request) (string, error) {
	i.m.running.Inc()
	defer i.m.running.Dec()
	id, err := i.next.Start(ctx, req)
	v := api.VerdictStarted
	if err != nil {
		v = verdict(nil, err)
	}
	i.m.runs.WithLabelValues(v).Inc()
	return id, err
}
