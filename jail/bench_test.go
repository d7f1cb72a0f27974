package jail_test

import (
	"context"
	"testing"
	"time"

	"github.com/jaild/jaild/jail"
)

// BenchmarkRunTrue measures a whole sandbox lifecycle (create, start `true`,
// wait, read counters, destroy) in one Manager, as the daemon does it.
func BenchmarkRunTrue(b *testing.B) {
	m := newManager(b)
	spec := &jail.Spec{Command: jail.Command{Args: []string{"true"}}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Run(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTrueParallel runs sandboxes from GOMAXPROCS goroutines.
func BenchmarkRunTrueParallel(b *testing.B) {
	m := newManager(b)
	spec := &jail.Spec{Command: jail.Command{Args: []string{"true"}}}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.Run(context.Background(), spec); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPoolRunTrueWarm measures a run handed to a sandbox the pool
// started ahead of time: the latency an occasional caller sees. The wait for
// the pool to refill is not timed.
func BenchmarkPoolRunTrueWarm(b *testing.B) {
	m := newManager(b)
	p, err := m.NewPool(1, jail.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	spec := &jail.Spec{Command: jail.Command{Args: []string{"true"}}}
	for b.Loop() {
		b.StopTimer()
		for p.Ready() == 0 {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		if _, err := p.Run(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
	}
	if hits, misses := p.Stats(); misses > 0 {
		b.Fatalf("%d of %d runs found the pool empty", misses, hits+misses)
	}
}

// BenchmarkPoolRunTrueParallel is sustained load on a pool: it shows what the
// pool adds when runs come faster than sandboxes can be built.
func BenchmarkPoolRunTrueParallel(b *testing.B) {
	m := newManager(b)
	p, err := m.NewPool(4, jail.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	spec := &jail.Spec{Command: jail.Command{Args: []string{"true"}}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Run(context.Background(), spec); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
