// Command loadgen measures a jaild daemon's POST /run throughput and latency
// at one or more concurrency levels:
//
//	go run ./scripts/loadgen -url http://127.0.0.1:8080/run -c 1,4,16 -n 200 -body '{"command":"true"}'
//
// Every level is bounded in requests (-n) and time (-duration), and only
// loopback daemons (or a unix socket) are accepted: this is a benchmark of the
// local host, never a load test of someone else's. For each level it prints
// one JSON object on a line of its own to stdout (scripts/bench.sh reads the
// last one):
//
//	{"concurrency":4,"requests":200,"errors":0,"seconds":1.62,"rps":123.4,"p50_ms":30.1,"p99_ms":55.0}
//
// and a human-readable line to stderr. A request counts as an error unless
// it is answered 200 with exit code 0; errors are still latency samples.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/benchstat"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
)

// Level is the result of one concurrency level.
type Level struct {
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"rps"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	FirstError  string  `json:"first_error,omitempty"`
}

func main() {
	var (
		base      = flag.String("url", "http://127.0.0.1:8080/run", "daemon URL, with or without /run (loopback only)")
		socket    = flag.String("socket", "", "daemon unix socket, instead of -url")
		tokenFile = flag.String("token-file", "", "file holding the bearer token")
		levels    = flag.String("c", "1,4,16", "comma-separated concurrency levels")
		n         = flag.Int("n", 200, "requests per level (at most 100000)")
		maxTime   = flag.Duration("duration", 60*time.Second, "time limit per level (at most 10m)")
		warmup    = flag.Int("warmup", 5, "unmeasured requests before each level")
		body      = flag.String("body", `{"executable":"true"}`, "the /run request to send")
		pause     = flag.Duration("pause", 0, "each client's pause after each request: an occasional caller rather than a flood")
		vary      = flag.Bool("vary", false, `replace "{{n}}" in the request's command with the request's number, so that no two requests are the same to the daemon's caches`)
		execMode  = flag.Bool("exec", false, "run the command after -- instead of requests: each worker execs it in a loop (see exec.go)")
	)
	flag.Parse()
	if *execMode {
		if err := runExec(flag.Args(), *levels, *n, *maxTime, *pause, *warmup); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "loadgen: no arguments expected; the request is -body")
		os.Exit(2)
	}
	req, err := api.DecodeRequest(strings.NewReader(*body))
	if err == nil {
		_, _, err = req.Spec()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: -body:", err)
		os.Exit(2)
	}
	if *vary && !strings.Contains(req.Command, "{{n}}") {
		fmt.Fprintln(os.Stderr, `loadgen: -vary needs "{{n}}" in the -body's command`)
		os.Exit(2)
	}
	if err := run(*base, *socket, *tokenFile, *levels, *n, *maxTime, *pause, *warmup, req, *vary); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(base, socket, tokenFile, levelList string, n int, maxTime, pauseTime time.Duration, warmup int, req *api.Request, vary bool) error {
	if n <= 0 || n > 100000 || maxTime <= 0 || maxTime > 10*time.Minute || warmup < 0 || warmup > 1000 {
		return errors.New("-n must be 1..100000, -duration 0..10m, -warmup 0..1000")
	}
	var concs []int
	for _, s := range strings.Split(levelList, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c <= 0 || c > 256 {
			return fmt.Errorf("-c %q: want concurrency levels between 1 and 256", levelList)
		}
		concs = append(concs, c)
	}
	opts := client.Options{Socket: socket}
	if socket == "" {
		if err := benchstat.CheckLoopback("loadgen", base); err != nil {
			return err
		}
		opts.Server = base
	}
	if tokenFile != "" {
		tok, err := client.ReadTokenFile(tokenFile)
		if err != nil {
			return err
		}
		opts.Token = tok
	}
	var seq atomic.Int64
	nextReq := func() *api.Request {
		if !vary {
			return req
		}
		r := *req
		r.Command = strings.ReplaceAll(r.Command, "{{n}}", strconv.FormatInt(seq.Add(1), 10))
		return &r
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for _, c := range concs {
		// A transport per level, with enough idle connections for its
		// workers (the default keeps 2), so that keep-alive works.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.MaxIdleConnsPerHost = c
		if socket != "" {
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			}
		}
		opts.Transport = tr
		client, err := client.New(opts)
		if err != nil {
			return err
		}
		for range warmup {
			if _, err := client.Run(ctx, nextReq()); err != nil {
				return fmt.Errorf("warm-up request: %w", err)
			}
		}
		l := level(ctx, func(ctx context.Context, _ int) error {
			resp, err := client.Run(ctx, nextReq())
			if err == nil && resp.ExitCode != 0 {
				err = fmt.Errorf("exit code %d: %s", resp.ExitCode, resp.Stderr)
			}
			return err
		}, c, n, maxTime, pauseTime)
		tr.CloseIdleConnections()
		report(l)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// report prints a level's JSON line to stdout and a readable one to stderr.
func report(l Level) {
	json.NewEncoder(os.Stdout).Encode(l)
	fmt.Fprintf(os.Stderr, "concurrency=%d requests=%d errors=%d rps=%.1f p50_ms=%.2f p99_ms=%.2f seconds=%.2f\n",
		l.Concurrency, l.Requests, l.Errors, l.RPS, l.P50MS, l.P99MS, l.Seconds)
	if l.FirstError != "" {
		fmt.Fprintf(os.Stderr, "loadgen: first error at concurrency %d: %s\n", l.Concurrency, l.FirstError)
	}
}

// level runs do up to n times with c workers (do gets the worker's index),
// stopping at maxTime.
func level(ctx context.Context, do func(ctx context.Context, worker int) error, c, n int, maxTime, pause time.Duration) Level {
	ctx, cancel := context.WithTimeout(ctx, maxTime)
	defer cancel()
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		firstErr  string
		wg        sync.WaitGroup
	)
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				err := do(ctx, w)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return // cut off by -max-time: not a sample
				}
				mu.Lock()
				latencies = append(latencies, d)
				if err != nil {
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
				}
				mu.Unlock()
				if pause > 0 {
					select {
					case <-time.After(pause):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	l := Level{Concurrency: c, Requests: len(latencies), Errors: errs, Seconds: secs, FirstError: firstErr}
	if len(latencies) > 0 {
		l.RPS = float64(len(latencies)) / secs
		l.P50MS = benchstat.MS(benchstat.Percentile(latencies, 0.50))
		l.P99MS = benchstat.MS(benchstat.Percentile(latencies, 0.99))
	}
	return l
}
