package run

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jaild/jaild/policy"
)

// policyResults are every policy.Result, pre-created as label values.
var policyResults = []policy.Result{policy.Allowed, policy.Denied, policy.DenyAll,
	policy.EvalError, policy.Unresolved, policy.Unparsed}

// policyMetrics export what the policy engine tells its Observer. They
// are registered in the daemon's registry by the first PolicyObserver
// call, so that a daemon without a policy shows none of them.
type policyMetrics struct {
	decisions *prometheus.CounterVec
	eval      prometheus.Histogram
	revision  *prometheus.GaugeVec
	denyAll   prometheus.Gauge
	loads     *prometheus.CounterVec

	mu      sync.Mutex // orders Loaded calls: the revision series is replaced whole
	current string
}

// PolicyObserver returns the policy.Observer that records the engine's
// decisions and loads in m: pass it as policy.Options.Observer. A nil m
// returns nil (nothing observed).
//
//	jaild_policy_decisions_total{result,mode}  result is policy.Result
//	                                           (allow, deny, deny_all,
//	                                           eval_error, resolve_error,
//	                                           parse_error), mode enforce
//	                                           or shadow
//	jaild_policy_eval_seconds                  resolution, parsing and
//	                                           evaluation of one decision
//	jaild_policy_revision{revision}            1 for the active set's
//	                                           revision; none in deny-all
//	jaild_policy_deny_all                      1 while no valid set is
//	                                           loaded
//	jaild_policy_loads_total{result}           loads of the directory, ok
//	                                           or error
func (m *Metrics) PolicyObserver() policy.Observer {
	if m == nil {
		return nil
	}
	m.policyOnce.Do(func() {
		p := &policyMetrics{
			decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: "jaild", Name: "policy_decisions_total",
				Help: "Policy decisions, by result (allow, deny, deny_all, eval_error, resolve_error, parse_error) and mode (enforce, shadow: denials that ran anyway).",
			}, []string{"result", "mode"}),
			eval: prometheus.NewHistogram(prometheus.HistogramOpts{
				Namespace: "jaild", Name: "policy_eval_seconds",
				Help:    "Time of one policy decision: executable resolution and hashing, shell parsing and Rego evaluation.",
				Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3},
			}),
			revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Namespace: "jaild", Name: "policy_revision",
				Help: "1 for the revision (a hash of the files) of the active policy set; no series while deny-all is on.",
			}, []string{"revision"}),
			denyAll: prometheus.NewGauge(prometheus.GaugeOpts{
				Namespace: "jaild", Name: "policy_deny_all",
				Help: "1 while no valid policy set is loaded and every run is denied.",
			}),
			loads: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: "jaild", Name: "policy_loads_total",
				Help: "Loads of the policy directory (start and live reloads), by result: ok, or error (deny-all).",
			}, []string{"result"}),
		}
		for _, r := range policyResults {
			for _, mode := range []policy.Mode{policy.Enforce, policy.Shadow} {
				p.decisions.WithLabelValues(string(r), string(mode))
			}
		}
		p.loads.WithLabelValues("ok")
		p.loads.WithLabelValues("error")
		m.reg.MustRegister(p.decisions, p.eval, p.revision, p.denyAll, p.loads)
		m.policy = p
	})
	return m.policy
}

// Decided implements policy.Observer.
func (p *policyMetrics) Decided(result policy.Result, shadow bool, eval time.Duration) {
	mode := policy.Enforce
	if shadow {
		mode = policy.Shadow
	}
	p.decisions.WithLabelValues(string(result), string(mode)).Inc()
	p.eval.Observe(eval.Seconds())
}

// Loaded implements policy.Observer.
func (p *policyMetrics) Loaded(revision string, denyAll bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.loads.WithLabelValues("error").Inc()
	} else {
		p.loads.WithLabelValues("ok").Inc()
	}
	if denyAll {
		p.denyAll.Set(1)
		revision = ""
	} else {
		p.denyAll.Set(0)
	}
	if revision != p.current {
		p.revision.Reset()
		if revision != "" {
			p.revision.WithLabelValues(revision).Set(1)
		}
		p.current = revision
	}
}
