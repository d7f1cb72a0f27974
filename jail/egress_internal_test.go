package jail

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkProxyNetNS measures what egress adds to a sandbox's set-up and
// teardown by itself: the namespace with lo up, its pin, the listener, and
// their removal. (A sandbox without egress has libcontainer make a network
// namespace and bring lo up instead, which this one replaces.)
func BenchmarkProxyNetNS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	dir := b.TempDir()
	var setup []time.Duration
	for b.Loop() {
		path := filepath.Join(dir, "ns")
		start := time.Now()
		ln, err := newEgressNetNS(path)
		if err != nil {
			b.Fatal(err)
		}
		setup = append(setup, time.Since(start))
		ln.Close()
		if err := removeNetNS(path); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(setup)
	b.ReportMetric(float64(setup[len(setup)/2].Microseconds())/1000, "ms-p50-setup")
}
