package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"golang.org/x/sys/unix"
)

// densityOpts are the -density mode's settings.
type densityOpts struct {
	levels []int
	secs   time.Duration // per throughput level
	n      int           // calls per latency measurement
	// series is the number of back-to-back calls in one session: enough
	// that the few sandboxes a busy session keeps started cover a small
	// share of them, and the p50 is that of calls in a row, not theirs.
	series int
	memcg  string        // a cgroup v1 memory dir or v2 dir holding the daemon; "" for none
	pids   []int         // the daemon's processes (front end, worker), for their RSS, mounts and descriptors
	hold   time.Duration // after the last level, before the sessions go
	// idle is the daemon's --session-prestart-idle; 0 if its sessions
	// never go dormant.
	idle time.Duration
	// baseline, if not nil, is a second daemon that holds no session:
	// each one-shot throughput level runs on it right after the
	// sessions' daemon, so that their ratio is the sessions' cost, not
	// the machine's drift between levels minutes apart.
	baseline *client.Client
}

// parseLevels reads "0,250,500".
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v > 10000 || (len(out) > 0 && v < out[len(out)-1]) {
			return nil, fmt.Errorf("-density: %q: ascending session counts 0..10000", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// runDensity fills the daemon with idle sessions level by level and, at
// each level, measures what a caller sees: the session create rate, one-shot
// throughput (1 and 4 connections), a paced pooled one-shot, calls back to
// back and 4 at once in one session, the memory per idle session and, for
// each of the daemon's processes given, its mount table's size (which every
// new sandbox copies) and its open descriptors. With o.idle, each fill is
// followed by a wait past it, so that the idle sessions are dormant as a
// real fleet's would be, and the level ends with the first call in some of
// them (dormantCalls). Every session it made is deleted at the end.
func runDensity(ctx context.Context, base, tokenFile string, o densityOpts) ([]Row, error) {
	c, err := newClient(base, tokenFile)
	if err != nil {
		return nil, err
	}
	var idle []string
	defer func() {
		// Deleted 4 at a time: the daemon tears each down in the worker.
		deleteAll(c, idle)
	}()
	var rows []Row
	var mem0 int64
	var fds0 []int
	for li, level := range o.levels {
		t0 := time.Now()
		for len(idle) < level {
			s, err := c.CreateSession(ctx, &api.SessionRequest{})
			if err != nil {
				return rows, fmt.Errorf("create idle session %d: %w", len(idle), err)
			}
			idle = append(idle, s.ID)
		}
		fill := time.Since(t0)
		// The prestarted sandboxes of the last sessions are still being
		// built: let them settle, as idle sessions would, and, with
		// o.idle, go dormant (a sandbox waits o.idle once built).
		settle(ctx, 2*time.Second)
		var quiet time.Duration
		if o.idle > 0 {
			settle(ctx, o.idle+time.Second)
			// Going dormant, every session's waiting sandbox is torn
			// down, a few at a time: at 2,000 sessions that takes tens
			// of seconds, and measuring during it would charge those
			// teardowns to the idle sessions.
			if len(o.pids) > 1 {
				quiet = waitQuiet(ctx, o.pids[1])
			}
		}
		mem := memUsage(o.memcg, o.pids)
		if li == 0 {
			mem0 = mem
		}
		pre := fmt.Sprintf("@%d ", level)
		r, err := densityLevel(ctx, c, o)
		if err != nil {
			return rows, fmt.Errorf("at %d sessions: %w", level, err)
		}
		if o.idle > 0 && level >= o.n {
			d, err := dormantCalls(ctx, c, idle[level-o.n:level], o.idle, r)
			if err != nil {
				return rows, fmt.Errorf("at %d sessions: %w", level, err)
			}
			r = append(r, d...)
		}
		for i := range r {
			r[i].Name = pre + r[i].Name
		}
		if n := level - prevLevel(o.levels, li); n > 0 {
			r = append(r, Row{Name: pre + "fill: sessions/s (" + strconv.Itoa(n) + ")", Calls: n,
				Mean: float64(n) / fill.Seconds()})
		}
		if quiet > 0 {
			r = append(r, Row{Name: pre + "dormant, sandboxes torn down: s after the idle time", Calls: level,
				Mean: quiet.Seconds()})
		}
		if level > 0 && mem > 0 {
			r = append(r, Row{Name: pre + "memory per idle session, KiB", Calls: level,
				Mean: float64(mem-mem0) / 1024 / float64(level)})
		}
		for i, p := range o.pids {
			mounts, fds := procCounts(p)
			if li == 0 {
				fds0 = append(fds0, fds)
			}
			who := procName(i, p)
			r = append(r, Row{Name: pre + who + ": mount table lines", Calls: level, Mean: float64(mounts)},
				Row{Name: pre + who + ": open descriptors", Calls: level, Mean: float64(fds)})
			if level > 0 && i < len(fds0) {
				r = append(r, Row{Name: pre + who + ": descriptors per idle session", Calls: level,
					Mean: float64(fds-fds0[i]) / float64(level)})
			}
		}
		rows = append(rows, r...)
		printRows(r)
	}
	if o.hold > 0 {
		fmt.Fprintf(os.Stderr, "holding %d sessions for %v\n", len(idle), o.hold)
		settle(ctx, o.hold)
	}
	return rows, nil
}

// dormantCalls times the first call in each of ids, sessions idle past the
// daemon's --session-prestart-idle (idle): dormant, each builds a fresh
// sandbox. Then, once they keep one started again, it times another call
// in each, a prestarted one, for comparison; level holds the level's rows,
// whose paced pooled one-shot is the other comparison.
func dormantCalls(ctx context.Context, c *client.Client, ids []string, idle time.Duration, level []Row) ([]Row, error) {
	var first, again []time.Duration
	for _, round := range []*[]time.Duration{&first, &again} {
		for _, id := range ids {
			settle(ctx, 100*time.Millisecond)
			d, err := call(ctx, c, &api.Request{Command: "true", SessionID: id})
			if err != nil {
				return nil, err
			}
			*round = append(*round, d)
		}
		// The woken sessions' sandboxes are built meanwhile; each
		// waits idle before its session goes dormant again.
		settle(ctx, min(time.Second, idle/4))
	}
	rows := []Row{row("first call in a dormant session", first), row("next call in that session (prestarted)", again)}
	for _, r := range level {
		if r.Name == "paced pooled one-shot (100 ms apart)" && r.P50MS > 0 {
			rows = append(rows, Row{Name: "  first dormant call p50 / paced pooled p50 (x)", Mean: rows[0].P50MS / r.P50MS})
		}
	}
	return rows, nil
}

// kcmpFiles is kcmp(2)'s KCMP_FILES: do two tasks share a file table?
const kcmpFiles = 2

// procCounts is the number of lines of pid's mountinfo and of its open
// descriptors (-1 each if unknown): those of the process's file table and
// of any thread's table of its own (the worker's descriptor store, which
// keeps the sessions' descriptors out of the table that sandbox starts
// copy), told apart with kcmp(KCMP_FILES).
func procCounts(pid int) (mounts, fds int) {
	mounts, fds = -1, -1
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); err == nil {
		mounts = strings.Count(string(b), "\n")
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return mounts, fds
	}
	fds = len(ents)
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil || tid == pid {
			continue
		}
		if same, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid), uintptr(tid), kcmpFiles, 0, 0, 0); errno != 0 || same == 0 {
			continue
		}
		if own, err := os.ReadDir(fmt.Sprintf("/proc/%d/task/%d/fd", pid, tid)); err == nil {
			fds += len(own)
		}
	}
	return mounts, fds
}

// procName names the i-th of -pids: the front end, then its worker.
func procName(i, pid int) string {
	switch i {
	case 0:
		return "front end"
	case 1:
		return "worker"
	}
	return "pid " + strconv.Itoa(pid)
}

func prevLevel(levels []int, i int) int {
	if i == 0 {
		return 0
	}
	return levels[i-1]
}

// waitQuiet waits until the worker's number of child processes (its
// sandboxes' inits, its watchdog) has not changed for 3 s, at most 3
// minutes, and returns how long it waited.
func waitQuiet(ctx context.Context, worker int) time.Duration {
	t0 := time.Now()
	last, since := -1, time.Now()
	for time.Since(t0) < 3*time.Minute && ctx.Err() == nil {
		if n := children(worker); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 3*time.Second {
			break
		}
		settle(ctx, 250*time.Millisecond)
	}
	return time.Since(t0)
}

// children counts pid's child processes; -1 if unknown.
func children(pid int) int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return -1
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			return -1
		}
		n += len(strings.Fields(string(b)))
	}
	return n
}

func settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// densityLevel measures one level.
func densityLevel(ctx context.Context, c *client.Client, o densityOpts) ([]Row, error) {
	// Session create and delete, 20 probes one after the other.
	t0 := time.Now()
	probes, creates, err := createProbes(ctx, c, 20)
	if err != nil {
		return nil, err
	}
	createWall := time.Since(t0)
	settle(ctx, 500*time.Millisecond)
	oneShot := &api.Request{Command: "true"}
	inSession := &api.Request{Command: "true", SessionID: probes[0]}

	// A paced pooled one-shot, and back-to-back calls in one session.
	paced, err := serialCalls(ctx, c, oneShot, o.n, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	settle(ctx, 300*time.Millisecond)
	b2b, err := serialCalls(ctx, c, inSession, o.series, 0)
	if err != nil {
		return nil, err
	}
	four, err := fourAtOnce(ctx, c, inSession, max(o.n/2, 1))
	if err != nil {
		return nil, err
	}
	// Throughput, one-shot, 1 and 4 connections, once the busy session's
	// extra sandboxes are gone (it keeps four for 2 s after its last
	// call, see jail/workspacewarm.go): their builds and teardowns would
	// otherwise land on the first level, and not on the baseline's.
	settle(ctx, 3*time.Second)
	var tput []Row
	for _, conns := range []int{1, 4} {
		n, lat, err := flatOut(ctx, c, oneShot, conns, o.secs)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("one-shot req/s, %d connection(s)", conns)
		r := row(name, lat)
		r.Mean = float64(n) / o.secs.Seconds()
		tput = append(tput, r)
		if o.baseline == nil {
			continue
		}
		bn, blat, err := flatOut(ctx, o.baseline, oneShot, conns, o.secs)
		if err != nil {
			return nil, fmt.Errorf("the baseline daemon: %w", err)
		}
		b := row(name+", a daemon with no session", blat)
		b.Mean = float64(bn) / o.secs.Seconds()
		tput = append(tput, b, Row{Name: "  " + name + ": this / no session (x)", Mean: r.Mean / b.Mean})
	}
	deletes, err := deleteProbes(ctx, c, probes)
	if err != nil {
		return nil, err
	}
	rows := []Row{
		{Name: "session create: sessions/s (20 serial)", Calls: 20, Mean: 20 / createWall.Seconds()},
		row("POST /sessions", creates),
		row("DELETE /sessions/{id}", deletes),
		row(`paced pooled one-shot (100 ms apart)`, paced),
		row("session, back to back", b2b),
		row("session, 4 at once", four),
	}
	p := rows[3].P50MS
	rows = append(rows,
		Row{Name: "  back to back p50 / paced pooled p50 (x)", Mean: rows[4].P50MS / p},
		Row{Name: "  4 at once p50 / paced pooled p50 (x)", Mean: rows[5].P50MS / p})
	return append(rows, tput...), nil
}

// createProbes creates n sessions one after the other and returns their
// ids and how long each create took. On error it deletes those it made.
func createProbes(ctx context.Context, c *client.Client, n int) ([]string, []time.Duration, error) {
	ids := make([]string, 0, n)
	var took []time.Duration
	for range n {
		t := time.Now()
		s, err := c.CreateSession(ctx, &api.SessionRequest{})
		if err != nil {
			deleteAll(c, ids)
			return nil, nil, fmt.Errorf("create a session: %w", err)
		}
		took = append(took, time.Since(t))
		ids = append(ids, s.ID)
	}
	return ids, took, nil
}

// deleteProbes deletes the sessions ids one after the other and returns
// how long each delete took.
func deleteProbes(ctx context.Context, c *client.Client, ids []string) ([]time.Duration, error) {
	var took []time.Duration
	for _, id := range ids {
		t := time.Now()
		if err := c.DeleteSession(ctx, id); err != nil {
			return nil, fmt.Errorf("delete session %s: %w", id, err)
		}
		took = append(took, time.Since(t))
	}
	return took, nil
}

// serialCalls posts req n times, one after the other, pause apart, and
// returns each call's latency.
func serialCalls(ctx context.Context, c *client.Client, req *api.Request, n int, pause time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	for range n {
		if pause > 0 {
			settle(ctx, pause)
		}
		d, err := call(ctx, c, req)
		if err != nil {
			return nil, err
		}
		lat = append(lat, d)
	}
	return lat, nil
}

// fourAtOnce posts req 4 times at once, in rounds 300 ms apart, and
// returns each call's latency.
func fourAtOnce(ctx context.Context, c *client.Client, req *api.Request, rounds int) ([]time.Duration, error) {
	var four []time.Duration
	var mu sync.Mutex
	for range rounds {
		settle(ctx, 300*time.Millisecond)
		var wg sync.WaitGroup
		var ferr atomic.Value
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := call(ctx, c, req)
				if err != nil {
					ferr.Store(err)
				}
				mu.Lock()
				four = append(four, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if err, _ := ferr.Load().(error); err != nil {
			return nil, err
		}
	}
	return four, nil
}

// flatOut posts req from conns clients back to back for d.
func flatOut(ctx context.Context, c *client.Client, req *api.Request, conns int, d time.Duration) (int, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		ferr error
		wg   sync.WaitGroup
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				x, err := call(ctx, c, req)
				mu.Lock()
				if err != nil && ctx.Err() == nil && ferr == nil {
					ferr = err
				}
				if err == nil {
					lat = append(lat, x)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return len(lat), lat, ferr
}

func deleteAll(c *client.Client, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = c.DeleteSession(context.Background(), id)
		}()
	}
	wg.Wait()
}

// memUsage is the memory charged to the daemon's cgroup (pages, kernel
// objects, tmpfs, its sandboxes'), or else the RSS of its processes; 0 if
// neither is known.
func memUsage(cg string, pids []int) int64 {
	if cg != "" {
		for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
			if b, err := os.ReadFile(cg + "/" + f); err == nil {
				v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return v
			}
		}
	}
	var sum int64
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				sum += v * 1024
			}
		}
	}
	return sum
}

func printRows(rows []Row) {
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "%-52s %6d %8.2f %8.2f %8.2f\n", r.Name, r.Calls, r.P50MS, r.P99MS, r.Mean)
	}
}
