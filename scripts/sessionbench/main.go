// Command sessionbench measures what a session adds to a call, against a
// running jaild daemon (scripts/bench-sessions.sh starts one):
//
//		go run ./scripts/sessionbench -url http://127.0.0.1:8080 -n 200
//
//	 1. One client posts {"command":"true"} to /run N times one-shot and N times
//	    with a session's session_id, interleaved (one-shot then session, then
//	    session then one-shot, ...) so that both see the same load, and prints
//	    their p50, p99 and mean and the p50 difference. With -gap, it pauses
//	    that long (untimed) before each call, as an agent thinks between its
//	    calls: the daemon's pool and the session's prestarted sandbox are
//	    then ready, rather than still being rebuilt for the previous call.
//	 2. -sessions sessions are made, then each runs -calls calls one after the
//	    other, all sessions at once; it prints the wall time of those calls and
//	    their p50 and p99, and the p50 of making and deleting a session.
//
// Only loopback daemons are accepted: this benchmarks the local host. Every
// call must answer 200 with exit code 0, or the run fails. It prints a table
// to stdout and, with -json, one JSON object per row instead.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/benchstat"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
)

// Row is one line of the result.
type Row struct {
	Name  string  `json:"name"`
	Calls int     `json:"calls"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	Mean  float64 `json:"mean_ms"`
	Wall  float64 `json:"wall_ms,omitempty"`
}

func main() {
	var (
		base      = flag.String("url", "http://127.0.0.1:8080", "daemon base URL (loopback only)")
		tokenFile = flag.String("token-file", "", "file holding the bearer token")
		n         = flag.Int("n", 200, "calls of each kind in the interleaved comparison (1..10000)")
		sessions  = flag.Int("sessions", 20, "sessions at once in the concurrent part (1..64)")
		calls     = flag.Int("calls", 5, "calls per session in the concurrent part (1..1000)")
		warmup    = flag.Int("warmup", 5, "unmeasured calls of each kind first")
		gapFlag   = flag.Duration("gap", 0, "untimed pause before each call of the interleaved comparison (0..10s)")
		asJSON    = flag.Bool("json", false, "print one JSON object per row")
		breakdown = flag.Bool("breakdown", false, "instead: where a shell call in a session spends its extra time (the session's sandbox, the state report)")
		density   = flag.String("density", "", "instead: with this many idle sessions live (ascending, e.g. 0,500,2000), the create rate, one-shot throughput, paced pooled and in-session latency")
		secs      = flag.Duration("secs", 5*time.Second, "with -density: how long each throughput level runs")
		memcg     = flag.String("memcg", "", "with -density: the daemon's memory cgroup directory, for the memory per idle session")
		hold      = flag.Duration("hold", 0, "with -density: how long to keep the sessions after the last level (to profile the daemon)")
		idle      = flag.Duration("idle", 0, "with -density: the daemon's --session-prestart-idle: after each fill, wait past it, so that the idle sessions are dormant, and time the first call in dormant sessions (0: the daemon's sessions never go dormant)")
		series    = flag.Int("series", 100, "with -density: back-to-back calls in one session (1..10000); the first four or so find sandboxes the busy session keeps started")
		baseline  = flag.String("baseline", "", "with -density: a second daemon's base URL (same token file) that holds no session; each one-shot throughput level also runs on it, right after, and their ratio is printed")
		pidList   = flag.String("pids", "", "with -density: the daemon's pids (comma-separated: the front end, then its worker), for their mount tables and descriptors, and their RSS if -memcg is not given")
	)
	flag.Parse()
	if *n < 1 || *n > 10000 || *sessions < 1 || *sessions > 64 || *calls < 1 || *calls > 1000 || *warmup < 0 || *warmup > 1000 ||
		*gapFlag < 0 || *gapFlag > 10*time.Second || *series < 1 || *series > 10000 {
		fmt.Fprintln(os.Stderr, "sessionbench: -n 1..10000, -sessions 1..64, -calls 1..1000, -warmup 0..1000, -gap 0..10s, -series 1..10000")
		os.Exit(2)
	}
	gap = *gapFlag
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	run := run
	if *density != "" {
		levels, err := parseLevels(*density)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sessionbench:", err)
			os.Exit(2)
		}
		o := densityOpts{levels: levels, secs: *secs, n: *n, series: *series, memcg: *memcg, hold: *hold, idle: *idle}
		if *baseline != "" {
			b, err := newClient(*baseline, *tokenFile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "sessionbench:", err)
				os.Exit(2)
			}
			o.baseline = b
		}
		for _, f := range strings.Split(*pidList, ",") {
			if p, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
				o.pids = append(o.pids, p)
			}
		}
		run = func(ctx context.Context, base, tokenFile string, _, _, _, _ int) ([]Row, error) {
			return runDensity(ctx, base, tokenFile, o)
		}
	}
	if *breakdown {
		run = func(ctx context.Context, base, tokenFile string, n, _, _, warmup int) ([]Row, error) {
			return runBreakdown(ctx, base, tokenFile, n, warmup)
		}
	}
	rows, err := run(ctx, *base, *tokenFile, *n, *sessions, *calls, *warmup)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sessionbench:", err)
		os.Exit(1)
	}
	if *asJSON {
		for _, r := range rows {
			json.NewEncoder(os.Stdout).Encode(r)
		}
		return
	}
	fmt.Printf("%-44s %6s %8s %8s %8s %9s\n", "", "calls", "p50_ms", "p99_ms", "mean_ms", "wall_ms")
	for _, r := range rows {
		wall := ""
		if r.Wall > 0 {
			wall = fmt.Sprintf("%.0f", r.Wall)
		}
		fmt.Printf("%-44s %6d %8.2f %8.2f %8.2f %9s\n", r.Name, r.Calls, r.P50MS, r.P99MS, r.Mean, wall)
	}
}

// newClient is a client of the loopback daemon at base.
func newClient(base, tokenFile string) (*client.Client, error) {
	if err := benchstat.CheckLoopback("sessionbench", base); err != nil {
		return nil, err
	}
	opts := client.Options{Server: base}
	if tokenFile != "" {
		tok, err := client.ReadTokenFile(tokenFile)
		if err != nil {
			return nil, err
		}
		opts.Token = tok
	}
	return client.New(opts)
}

// runBreakdown times, interleaved, the steps from a one-shot sh call to a
// shell call in a session (the same /bin/sh): the session's sandbox (argv,
// no report), then the EXIT trap and its report on fd 3.
func runBreakdown(ctx context.Context, base, tokenFile string, n, warmup int) ([]Row, error) {
	c, err := newClient(base, tokenFile)
	if err != nil {
		return nil, err
	}
	s, err := c.CreateSession(ctx, &api.SessionRequest{})
	if err != nil {
		return nil, fmt.Errorf("create a session: %w", err)
	}
	defer c.DeleteSession(context.Background(), s.ID)
	sh := func(id string) *api.Request {
		return &api.Request{Executable: "/bin/sh", Args: []string{"-c", "true"}, SessionID: id}
	}
	variants := []struct {
		name string
		req  *api.Request
	}{
		{`one-shot {"command":"true"} (sh -c)`, &api.Request{Command: "true"}},
		{"in a session argv sh -c true (no report)", sh(s.ID)},
		{`in a session {"command":"true"} (sh -c, trap, report)`, &api.Request{Command: "true", SessionID: s.ID}},
	}
	lat := make([][]time.Duration, len(variants))
	for i := range warmup + n {
		for k := range variants {
			v := variants[(k+i)%len(variants)] // rotate the order
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
			d, err := call(ctx, c, v.req)
			if err != nil {
				return nil, err
			}
			if i >= warmup {
				lat[(k+i)%len(variants)] = append(lat[(k+i)%len(variants)], d)
			}
		}
	}
	var rows []Row
	for k, v := range variants {
		rows = append(rows, row(v.name, lat[k]))
	}
	// Differences within each round (the three kinds one after the other),
	// whose median a changing load moves less than the medians' difference.
	paired := func(name string, a, b int) Row {
		d := make([]time.Duration, n)
		for i := range n {
			d[i] = lat[a][i] - lat[b][i]
		}
		return row(name, d)
	}
	return append(rows,
		paired("  session's sandbox (argv - one-shot), paired", 1, 0),
		paired("  the report (shell - argv in the session), paired", 2, 1),
		paired("  session shell call - one-shot, paired", 2, 0)), nil
}

func run(ctx context.Context, base, tokenFile string, n, nSessions, calls, warmup int) ([]Row, error) {
	c, err := newClient(base, tokenFile)
	if err != nil {
		return nil, err
	}
	// Part 1's session lives on through part 2.
	s, err := c.CreateSession(ctx, &api.SessionRequest{})
	if err != nil {
		return nil, fmt.Errorf("create a session: %w", err)
	}
	defer c.DeleteSession(context.Background(), s.ID)
	rows, err := runInterleaved(ctx, c, s.ID, n, warmup)
	if err != nil {
		return nil, err
	}
	conc, err := runConcurrent(ctx, c, nSessions, calls)
	if err != nil {
		return nil, err
	}
	return append(rows, conc...), nil
}

// runInterleaved is part 1: one-shot against in a session, interleaved: a
// shell command (sh on both sides, with the state-reporting EXIT trap in a
// session), then argv mode, where neither side has a shell or a state
// report: what is left is the sandbox's, the workspace's and the daemon's
// share. The calls in a session are in session id.
func runInterleaved(ctx context.Context, c *client.Client, id string, n, warmup int) ([]Row, error) {
	shell, err := compare(ctx, c, id, `{"command":"true"}`, func(id string) *api.Request {
		return &api.Request{Command: "true", SessionID: id}
	}, n, warmup)
	if err != nil {
		return nil, err
	}
	argv, err := compare(ctx, c, id, `{"executable":"true"}`, func(id string) *api.Request {
		return &api.Request{Executable: "true", SessionID: id}
	}, n, warmup)
	if err != nil {
		return nil, err
	}
	return append(shell, argv...), nil
}

// runConcurrent is part 2: nSessions sessions, made one after the other,
// then each running calls calls, all sessions at once, then deleted one
// after the other.
func runConcurrent(ctx context.Context, c *client.Client, nSessions, calls int) ([]Row, error) {
	ids := make([]string, nSessions)
	var creates, deletes []time.Duration
	defer func() {
		for _, id := range ids {
			if id != "" {
				c.DeleteSession(context.Background(), id)
			}
		}
	}()
	for i := range ids {
		t0 := time.Now()
		s, err := c.CreateSession(ctx, &api.SessionRequest{})
		if err != nil {
			return nil, fmt.Errorf("create session %d: %w", i, err)
		}
		creates = append(creates, time.Since(t0))
		ids[i] = s.ID
	}
	start := time.Now()
	lat, errs := callsAtOnce(ctx, c, ids, calls)
	wall := time.Since(start)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d sessions x %d calls: %d failed, the first: %w", nSessions, calls, len(errs), errs[0])
	}
	for i, id := range ids {
		t0 := time.Now()
		if err := c.DeleteSession(ctx, id); err != nil {
			return nil, fmt.Errorf("delete session %s: %w", id, err)
		}
		deletes = append(deletes, time.Since(t0))
		ids[i] = ""
	}
	conc := row(fmt.Sprintf("%d sessions x %d calls at once", nSessions, calls), lat)
	conc.Wall = benchstat.MS(wall)
	return []Row{conc, row("POST /sessions", creates), row("DELETE /sessions/{id}", deletes)}, nil
}

// callsAtOnce runs calls calls one after the other in each of the
// sessions ids, all sessions at once, and returns their latencies and
// errors; a session stops at its first error.
func callsAtOnce(ctx context.Context, c *client.Client, ids []string, calls int) ([]time.Duration, []error) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				d, err := call(ctx, c, &api.Request{Command: "true", SessionID: id})
				mu.Lock()
				lat = append(lat, d)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return lat, errs
}

// gap is -gap: the untimed pause before each call of compare.
var gap time.Duration

// compare times n requests mk("") (one-shot) and n requests mk(id) (in
// session id), interleaved: one-shot then session, then session then
// one-shot, and so on, so that both see the same load; each after gap.
func compare(ctx context.Context, c *client.Client, id, label string, mk func(string) *api.Request, n, warmup int) ([]Row, error) {
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
	oneShot := func() (time.Duration, error) { pause(); return call(ctx, c, mk("")) }
	inSession := func() (time.Duration, error) { pause(); return call(ctx, c, mk(id)) }
	for range warmup {
		if _, err := oneShot(); err != nil {
			return nil, err
		}
		if _, err := inSession(); err != nil {
			return nil, err
		}
	}
	var one, sess, paired []time.Duration
	for i := range n {
		first, second, a, b := oneShot, inSession, &one, &sess
		if i%2 == 1 {
			first, second, a, b = inSession, oneShot, &sess, &one
		}
		d, err := first()
		if err != nil {
			return nil, err
		}
		*a = append(*a, d)
		if d, err = second(); err != nil {
			return nil, err
		}
		*b = append(*b, d)
		paired = append(paired, sess[i]-one[i])
	}
	rOne, rSess := row("one-shot "+label, one), row("in a session "+label, sess)
	diff := Row{Name: "  session - one-shot", Calls: n, P50MS: rSess.P50MS - rOne.P50MS,
		P99MS: rSess.P99MS - rOne.P99MS, Mean: rSess.Mean - rOne.Mean}
	// The median of the differences of adjacent pairs: less moved by a
	// load that changes during the run than the difference of medians.
	pair := row("  paired difference", paired)
	pair.Mean = benchstat.MS(mean(paired))
	return []Row{rOne, rSess, diff, pair}, nil
}

// call posts req to /run.
func call(ctx context.Context, c *client.Client, req *api.Request) (time.Duration, error) {
	id := req.SessionID
	t0 := time.Now()
	resp, err := c.Run(ctx, req)
	d := time.Since(t0)
	if err == nil && resp.ExitCode != 0 {
		err = fmt.Errorf("exit code %d: %s", resp.ExitCode, resp.Stderr)
	}
	if err != nil {
		return d, fmt.Errorf("run (session %q): %w", id, err)
	}
	return d, nil
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(len(d), 1))
}

func row(name string, d []time.Duration) Row {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := Row{Name: name, Calls: len(s)}
	if len(s) > 0 {
		r.P50MS, r.P99MS, r.Mean = benchstat.MS(benchstat.Percentile(s, 0.5)), benchstat.MS(benchstat.Percentile(s, 0.99)), benchstat.MS(mean(s))
	}
	return r
}
