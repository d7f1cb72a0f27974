package policy

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
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

// shellNew is the i-th of BenchmarkShellNew's strings: three commands and
// a builtin, allowed by the router example, new every time so that no
// cache has it.
func shellNew(i int) Input {
	return Input{Shell: &Shell{Source: "cd /tmp && date | echo ok" + strconv.Itoa(i)}}
}

// BenchmarkShellNew splits a decision of a shell string seen for the
// first time, with the router example, into its parts: the whole decision
// (decide), the shell parse alone (parse), parse and resolution on the
// host (complete), the conversion of the completed input to OPA's value
// (input), and the Rego evaluation of Query alone on that value (eval).
// Each part is timed alone, its argument made outside the timed call.
//
// The -paced variants wait 100 ms before each call, as a daemon serving a
// paced client does: a call after an idle pause runs on cold caches and
// costs several times the back-to-back figure. Their ns/op includes the
// pause; p50-us and p99-us are the call's.
func BenchmarkShellNew(b *testing.B) {
	root := NewRoot("/")
	e, err := Open(Options{Dir: "../examples/policy", Resolver: root, NoWatch: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	st := e.cur.Load()
	ctx := context.Background()
	i := 0
	fresh := func() any { i++; return shellNew(i) }
	completed := func() any {
		in := fresh().(Input)
		if err := Complete(&in, root); err != nil {
			b.Fatal(err)
		}
		return &in
	}
	value := func() any { return completed().(*Input).value() }
	parts := []struct {
		name string
		prep func() any
		f    func(any)
	}{
		{"decide", fresh, func(x any) {
			if d := e.Decide(ctx, "", x.(Input)); !d.Allow || d.Cached {
				b.Fatalf("%s: allowed %v, cached %v: %s", d.Input.Shell.Source, d.Allow, d.Cached, d.Message)
			}
		}},
		{"parse", fresh, func(x any) {
			if _, err := ParseShell(x.(Input).Shell.Source, "sh"); err != nil {
				b.Fatal(err)
			}
		}},
		{"complete", fresh, func(x any) {
			in := x.(Input)
			if err := Complete(&in, root); err != nil {
				b.Fatal(err)
			}
		}},
		{"input", completed, func(x any) { x.(*Input).value() }},
		{"eval", value, func(x any) {
			rs, err := eval(ctx, st.set.query, x.(ast.Value))
			if err != nil || !rs.Allowed() {
				b.Fatalf("eval: %v, %v", rs, err)
			}
		}},
	}
	for _, pace := range []time.Duration{0, 100 * time.Millisecond} {
		for _, p := range parts {
			name := p.name
			if pace > 0 {
				name += "-paced"
			}
			b.Run(name, func(b *testing.B) {
				latenciesPrep(b, pace, p.prep, p.f)
			})
		}
	}
}

// latenciesPrep is latencies for an f that needs a fresh argument each
// time: prep makes it, untimed, then latenciesPrep waits pace, timed.
func latenciesPrep(b *testing.B, pace time.Duration, prep func() any, f func(any)) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		x := prep()
		b.StartTimer()
		time.Sleep(pace)
		start := time.Now()
		f(x)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
}
