package policy

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The parts of a decision, measured apart: where BenchmarkDecide's time
// goes. Each reports p50 and p99 like it.

// latencies times f b.N times and reports p50 and p99 in microseconds.
func latencies(b *testing.B, f func()) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		f()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
}

// BenchmarkResolve: one command looked up in the default PATH on the host,
// resolved and hashed (the hash cached).
func BenchmarkResolve(b *testing.B) {
	r := NewRoot("/")
	latencies(b, func() {
		if _, _, err := r.Resolve("date", "", ""); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkParseShell: the shell case's string parsed into its commands.
func BenchmarkParseShell(b *testing.B) {
	latencies(b, func() {
		if _, err := ParseShell("cd /tmp && date | echo ok", "sh"); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkEval: BenchmarkDecide's new requests with resolution taken out
// (a resolver that answers from a map), so evaluation, the input's
// conversion and the shell parse remain.
func BenchmarkEval(b *testing.B) {
	fixed := ResolverFunc(func(name, _, _ string) (string, string, error) {
		if name == "cd" {
			return "", "", ErrNotFound
		}
		return "/usr/bin/" + name, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nil
	})
	for _, bc := range decideCases {
		if bc.repeat {
			continue // the decision cache's, not evaluation
		}
		b.Run(bc.name, func(b *testing.B) {
			e, err := Open(Options{Dir: "../examples/policy", Resolver: fixed, NoWatch: true})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			i := 0
			latencies(b, func() {
				if d := e.Decide(ctx, "", bc.in(i)); d.Cached {
					b.Fatal("a cached decision")
				}
				i++
			})
		})
	}
}
