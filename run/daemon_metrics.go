package run

import "github.com/prometheus/client_golang/prometheus"

// ObserveDaemon adds the daemon's own state to m: how many times its worker
// exited and was restarted (workerExits), and whether it drains (draining).
// Either may be nil.
func (m *Metrics) ObserveDaemon(workerExits func() uint64, draining func() bool) {
	if m == nil {
		return
	}
	if workerExits != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "jaild", Name: "worker_exits_total",
			Help: "Times the sandbox worker exited and was restarted; the runs it held failed.",
		}, func() float64 { return float64(workerExits()) }))
	}
	if draining != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "jaild", Name: "draining",
			Help: "1 while the daemon drains or shuts down: it takes no new sessions or one-shot runs.",
		}, func() float64 {
			if draining() {
				return 1
			}
			return 0
		}))
	}
}
