package jail_test

import (
	"context"
	"testing"

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
