package jail_test

import (
	"context"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"golang.org/x/sys/unix"
)

// BenchmarkRunTrue measures a whole sandbox lifecycle (create, start `true`,
// wait, read counters, destroy) in one Manager, as the daemon does it.
//
// It reports two CPU figures per sandbox: the sandbox cgroup's (its init
// from the moment it joined the cgroup, then `true`) and that of every
// reaped child process of the benchmark (the init's earlier stages too).
func BenchmarkRunTrue(b *testing.B) {
	m := newManager(b)
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
	var cpu time.Duration
	before := childrenCPU(b)
	b.ResetTimer()
	for b.Loop() {
		res, err := m.Run(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		cpu += res.CPUTime
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "sandbox-cpu-ms/op")
	b.ReportMetric(float64((childrenCPU(b)-before).Microseconds())/1000/float64(b.N), "children-cpu-ms/op")
}

// childrenCPU is the user and system CPU time of the reaped children of
// the benchmark process.
func childrenCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunTrueParallel runs sandboxes from GOMAXPROCS goroutines.
func BenchmarkRunTrueParallel(b *testing.B) {
	m := newManager(b)
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
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
	p, err := m.NewPool(1, box.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		for p.Ready() == 0 {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		res, err := p.Run(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		cpu += res.CPUTime
	}
	// The sandbox's own CPU time (its cgroup's): the waiting init's
	// start and hand-off, and `true`.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "sandbox-cpu-ms/op")
	if hits, misses := p.Stats(); misses > 0 {
		b.Fatalf("%d of %d runs found the pool empty", misses, hits+misses)
	}
}

// BenchmarkPoolRunTrueParallel is sustained load on a pool: it shows what the
// pool adds when runs come faster than sandboxes can be built.
func BenchmarkPoolRunTrueParallel(b *testing.B) {
	m := newManager(b)
	p, err := m.NewPool(4, box.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Run(context.Background(), spec); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRunTrueTeardown compares what a caller of Run waits for when the
// sandbox is destroyed after the answer (the default teardown backlog) and
// before it (no backlog), one run at a time. The background teardowns of
// one iteration overlap the next's build, as in the daemon.
func BenchmarkRunTrueTeardown(b *testing.B) {
	for _, bc := range []struct {
		name    string
		backlog int
	}{{"answer first", 0}, {"teardown first", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			requireHost(b)
			env := testenv.New(b, "jaild-test")
			cfg := config(env)
			cfg.TeardownBacklog = bc.backlog
			m, err := jail.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close() })
			spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
			for b.Loop() {
				if _, err := m.Run(context.Background(), spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDestroy measures the teardown path alone: destroying a sandbox
// whose command (`true`) has exited and whose counters were read: the
// container, its cgroup (a dozen directories on cgroup v1), its state and
// its uid slot. Building and running the sandbox is not timed.
func BenchmarkDestroy(b *testing.B) {
	m := newManager(b)
	cmd := &box.Command{Args: []string{"true"}}
	for b.Loop() {
		b.StopTimer()
		destroy, err := jail.RunKept(m, cmd)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolHandover measures the hand-off alone: writing the command to
// a pooled sandbox's waiting init, its exec of `true`, and collecting the
// result. Building the sandbox and destroying it are not timed.
func BenchmarkPoolHandover(b *testing.B) {
	m := newManager(b)
	cmd := &box.Command{Args: []string{"true"}}
	for b.Loop() {
		b.StopTimer()
		w, err := jail.Prestart(m)
		if err != nil {
			b.Fatal(err)
		}
		// As in a pool, the sandbox has had time to reach its wait.
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		res, err := w.Handover(cmd)
		b.StopTimer()
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("handover: %v %+v", err, res)
		}
		if err := w.Destroy(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkOtherLimits: a run asking for other limits than the pool's,
// served by a pooled sandbox whose cgroup limits are set before the
// command is released, against the cold sandbox such a run got before.
func BenchmarkOtherLimits(b *testing.B) {
	spec := &jail.Spec{Limits: box.Limits{Memory: 128 << 20, Pids: 64}, Command: box.Command{Args: []string{"true"}}}
	b.Run("pooled", func(b *testing.B) {
		m := newManager(b)
		p, err := m.NewPool(1, box.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
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
	})
	b.Run("cold", func(b *testing.B) {
		m := newManager(b)
		for b.Loop() {
			if _, err := m.Run(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWorkspaceRunTrue compares runs on a workspace: in a fresh
// sandbox (Manager.Run), in the sandbox it keeps prestarted once it is
// ready (the latency an agent that thinks between calls sees; the wait for
// the next one is not timed), and back to back (a run may wait for the
// next sandbox's build).
func BenchmarkWorkspaceRunTrue(b *testing.B) {
	m := newManager(b)
	spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
	b.Run("fresh", func(b *testing.B) {
		ws, err := m.NewWorkspace(0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ws.Close() })
		s := *spec
		s.Workspace = ws
		for b.Loop() {
			if _, err := m.Run(context.Background(), &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, wait := range []bool{true, false} {
		name := "prestarted-ready"
		if !wait {
			name = "prestarted-back-to-back"
		}
		b.Run(name, func(b *testing.B) {
			ws, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { ws.Close() })
			for b.Loop() {
				if wait {
					b.StopTimer()
					for !ws.Prestarted() {
						time.Sleep(time.Millisecond)
					}
					b.StartTimer()
				}
				res, err := ws.Run(context.Background(), spec)
				if err != nil || !res.Prestarted {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
