package jail_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// dormantIdle is the PrestartIdle of the dormancy tests: long enough that
// a test sees a waiting sandbox (it waits that long once ready), short
// enough to wait for.
const dormantIdle = 3 * time.Second

// newIdleManager is newManager whose prestarted workspaces go dormant after
// idle (a negative idle: never).
func newIdleManager(t *testing.T, idle time.Duration) (*jail.Manager, *testenv.Install) {
	t.Helper()
	return newManagerWith(t, func(cfg *jail.Config) { cfg.PrestartIdle = idle })
}

// waitDormant waits until ws keeps no sandbox started.
func waitDormant(t *testing.T, ws *jail.Workspace) {
	t.Helper()
	waitFor(t, dormantIdle+20*time.Second, "a dormant workspace", func() bool {
		ready, want := jail.PrestartCounts(ws)
		return ready == 0 && want == 0
	})
}

// gone reports what is left of the sandboxes ids whose inits were pids: a
// live or unreaped init (its /proc entry), or a cgroup directory.
func gone(ids []string, pids []int) []string {
	var left []string
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			left = append(left, fmt.Sprintf("init %d", pid))
		}
	}
	for _, id := range ids {
		left = append(left, testenv.CgroupsNamed(id)...)
	}
	return left
}

// settle polls cond, which describes what is still wrong, until it
// describes nothing or 20s have passed, and returns its last description.
// A sandbox's teardown (and a descriptor closed by libcontainer's threads)
// ends a moment after the state that started it.
func settle(cond func() []string) []string {
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := cond()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWorkspaceDormant: a prestarted workspace with no run for the
// Manager's PrestartIdle destroys its waiting sandbox: its init is gone
// and reaped, its cgroups are removed, and the workspace holds only its
// own descriptors. The next run still works, on a fresh sandbox, and the
// workspace then keeps one sandbox started again (one: not hot).
func TestWorkspaceDormant(t *testing.T) {
	m, _ := newIdleManager(t, dormantIdle)
	// One first, closed again, so that what jaild opens once (the
	// watchdog, cgroup files) is not counted.
	first, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{}))
	if err != nil {
		t.Fatal(err)
	}
	waitPrestarted(t, first)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	m.WaitTeardowns()
	before := openFDs(t)

	wss := make([]*jail.Workspace, 3)
	var ids []string
	var pids []int
	for i := range wss {
		wss[i] = newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	}
	for _, ws := range wss {
		waitPrestarted(t, ws)
		i, p := jail.PrestartWaiting(ws)
		ids, pids = append(ids, i...), append(pids, p...)
	}
	// What the checks below look for is there while the sandboxes wait.
	if left := gone(ids, pids); len(left) < 2*len(wss) {
		t.Fatalf("waiting sandboxes %v: found only %v of their inits and cgroups", ids, left)
	}
	for _, ws := range wss {
		waitDormant(t, ws)
		if ws.Prestarted() {
			t.Error("Prestarted on a dormant workspace")
		}
	}
	if left := settle(func() []string { return gone(ids, pids) }); len(left) > 0 {
		t.Errorf("left of the waiting sandboxes of dormant workspaces: %v", left)
	}
	bound := len(wss) * jail.DormantWorkspaceFDs
	left := settle(func() []string {
		if n := openFDs(t) - before; n > bound {
			return []string{fmt.Sprint(n)}
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("%d dormant workspaces hold %s descriptors, over %d each", len(wss), left[0], jail.DormantWorkspaceFDs)
	}

	ws := wss[0]
	hits, misses := jail.PrestartStats(ws)
	res := wsRun(t, ws, sh(`echo woke > /work/f; cat /work/f`))
	if res.Prestarted || res.Stdout != "woke\n" {
		t.Errorf("the first run on a dormant workspace: prestarted %v, %q", res.Prestarted, res.Stdout)
	}
	if h, mi := jail.PrestartStats(ws); h != hits || mi != misses+1 {
		t.Errorf("hits %d -> %d, misses %d -> %d: want one miss", hits, h, misses, mi)
	}
	if _, want := jail.PrestartCounts(ws); want != 1 {
		t.Errorf("a woken workspace keeps %d sandboxes, want 1", want)
	}
	waitPrestarted(t, ws)
	res = wsRun(t, ws, sh(`cat /work/f`))
	if !res.Prestarted || res.Stdout != "woke\n" {
		t.Errorf("the run after waking: prestarted %v, %q", res.Prestarted, res.Stdout)
	}
	// The others stayed dormant.
	for _, other := range wss[1:] {
		if _, want := jail.PrestartCounts(other); want != 0 {
			t.Errorf("an idle workspace keeps %d sandboxes, want 0", want)
		}
	}
}

// TestWorkspaceNeverDormant: with a negative PrestartIdle, an idle
// workspace keeps its waiting sandbox, the same one, past the time it
// would otherwise have gone dormant.
func TestWorkspaceNeverDormant(t *testing.T) {
	m, _ := newIdleManager(t, -1)
	ws := newPrestartWorkspace(t, m, box.Limits{})
	ids, _ := jail.PrestartWaiting(ws)
	time.Sleep(2 * dormantIdle)
	if now, _ := jail.PrestartWaiting(ws); !slices.Equal(now, ids) {
		t.Errorf("waiting sandboxes %v, then %v: want the same", ids, now)
	}
	if res := wsRun(t, ws, sh(`true`)); !res.Prestarted {
		t.Errorf("not prestarted: %+v", res)
	}
}

// TestWorkspaceDormantClose: closing a dormant workspace, one whose wake
// build is under way, or one whose build ends after it went dormant
// again, leaves no process, cgroup, container state, mount or slot record
// of it.
func TestWorkspaceDormantClose(t *testing.T) {
	m, env := newIdleManager(t, dormantIdle)
	// While holding, a build hands the test its release and waits for
	// it; the others go by.
	var holding atomic.Bool
	held := make(chan chan struct{})
	jail.SetPrestartHook(m, func() {
		if holding.Load() {
			release := make(chan struct{})
			held <- release
			<-release
		}
	})
	// holdWake runs a command on the dormant ws and returns the release
	// of the build it wakes: it is under way, and held, at the return.
	holdWake := func(t *testing.T, ws *jail.Workspace) chan struct{} {
		holding.Store(true)
		if res := wsRun(t, ws, sh(`true`)); res.Prestarted {
			t.Errorf("the first run on a dormant workspace was prestarted")
		}
		release := <-held
		holding.Store(false)
		return release
	}
	leftovers := snapshotLeftovers(env)

	for _, tc := range []struct {
		name string
		// then holds the workspace after it went dormant, and returns
		// a build to release once it is closed (or nil).
		then func(t *testing.T, ws *jail.Workspace) chan struct{}
	}{
		{"dormant", func(*testing.T, *jail.Workspace) chan struct{} { return nil }},
		{"waking", holdWake},
		{"gone dormant while building", func(t *testing.T, ws *jail.Workspace) chan struct{} {
			release := holdWake(t, ws)
			waitDormant(t, ws)
			close(release)
			settle(func() []string {
				if b, _ := jail.PrestartState(ws); b > 0 {
					return []string{"building"}
				}
				return nil
			})
			if ws.Prestarted() {
				t.Error("a build that ended after the workspace went dormant is kept")
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{}))
			if err != nil {
				t.Fatal(err)
			}
			waitPrestarted(t, ws)
			waitDormant(t, ws)
			release := tc.then(t, ws)
			closed := make(chan error, 1)
			go func() { closed <- ws.Close() }()
			if release != nil {
				waitFor(t, 20*time.Second, "Close to begin", func() bool { _, c := jail.PrestartState(ws); return c })
				close(release)
			}
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
			m.WaitTeardowns()
			if left := settle(leftovers); len(left) > 0 {
				t.Errorf("left after Close: %v", left)
			}
		})
	}
}

// snapshotLeftovers returns what describes the processes, sandbox cgroups,
// container state, mounts and slot records of env that were not there at
// the call.
func snapshotLeftovers(env *testenv.Install) func() []string {
	state := func() []string {
		name := filepath.Base(env.Parent)
		out := testenv.ProcsInCgroup(name)
		for _, d := range testenv.CgroupsNamed(name) {
			sub, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
			out = append(out, sub...)
		}
		ents, _ := os.ReadDir(filepath.Join(env.StateDir, "containers"))
		for _, e := range ents {
			out = append(out, "container "+e.Name())
		}
		out = append(out, testenv.MountsUnder(env.StateDir)...)
		for _, s := range testenv.Slots(env.StateDir) {
			out = append(out, "slot "+s)
		}
		return out
	}
	before := state()
	return func() []string {
		return slices.DeleteFunc(state(), func(s string) bool { return slices.Contains(before, s) })
	}
}

// TestWorkspaceDormantMiss: the first run on a dormant workspace (a miss)
// runs on a waiting sandbox built for it, which serves what a prestarted
// one serves: its fd 3, a pipe of its own (a fresh sandbox would get the
// run's pipe itself), relayed to the run's pipe. One whose directory is
// missing still runs, on a fresh sandbox, and counts as one miss.
func TestWorkspaceDormantMiss(t *testing.T) {
	m, _ := newIdleManager(t, dormantIdle)
	ws := newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	waitPrestarted(t, ws)

	waitDormant(t, ws)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	spec := sh(`echo report >&3; readlink /proc/self/fd/3`)
	spec.ExtraFiles = []*os.File{w}
	var st unix.Stat_t
	if err := unix.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	hits, misses := jail.PrestartStats(ws)
	res := wsRun(t, ws, spec)
	w.Close()
	if res.Prestarted || res.ExitCode != 0 {
		t.Errorf("the first run on a dormant workspace: prestarted %v, exit %d, %q %q", res.Prestarted, res.ExitCode, res.Stdout, res.Stderr)
	}
	if res.Stdout == fmt.Sprintf("pipe:[%d]\n", st.Ino) || !strings.HasPrefix(res.Stdout, "pipe:[") {
		t.Errorf("the command's fd 3 is %q, the run's pipe is %d: want a pipe of the sandbox's own", res.Stdout, st.Ino)
	}
	if extra := <-got; extra != "report\n" {
		t.Errorf("fd 3 gave %q, want %q", extra, "report\n")
	}
	if h, mi := jail.PrestartStats(ws); h != hits || mi != misses+1 {
		t.Errorf("hits %d -> %d, misses %d -> %d: want one miss", hits, h, misses, mi)
	}

	waitDormant(t, ws)
	spec = sh(`pwd`)
	spec.Dir = "/work/made/by/a/fresh/init"
	hits, misses = jail.PrestartStats(ws)
	res = wsRun(t, ws, spec)
	if res.Prestarted || res.Stdout != spec.Dir+"\n" {
		t.Errorf("a missing directory: prestarted %v, %q %q", res.Prestarted, res.Stdout, res.Stderr)
	}
	if h, mi := jail.PrestartStats(ws); h != hits || mi != misses+1 {
		t.Errorf("hits %d -> %d, misses %d -> %d: want one miss", hits, h, misses, mi)
	}
}

// TestWorkspaceDormantHeap: a dormant workspace keeps nothing of the
// sandboxes it took or destroyed. Each kept them (their configs, files
// and libcontainer objects, about 12 KiB) in the unused tail of its list
// of ready ones, so 2,000 dormant sessions held 23 MB of the worker's
// heap, which every garbage collection marked. The heap per workspace is
// logged, not held to a bound: on a slow machine the runtime's own
// threads, made while the sandboxes are built, weigh in.
func TestWorkspaceDormantHeap(t *testing.T) {
	m, _ := newIdleManager(t, dormantIdle)
	const n = 40
	// One first, through the same steps, so that what is made once (the
	// JSON encoders' caches, the watchdog, the seccomp filter) is not
	// counted.
	first := newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	waitPrestarted(t, first)
	run(t, m, inWS(first, "true"))
	waitDormant(t, first)
	m.WaitTeardowns()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	wss := make([]*jail.Workspace, n)
	for i := range wss {
		wss[i] = newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	}
	// Half run once: a run takes the waiting sandbox (or, on a slow
	// machine where the workspace went dormant first, builds one) and
	// the workspace then keeps up to four for a moment (see
	// heatLocked). The others only go dormant, each destroying the one
	// it waited with. Not waited for: with dormantIdle, a slow machine
	// could see it go before it is seen.
	for _, ws := range wss[:n/2] {
		run(t, m, inWS(ws, "true"))
	}
	kept := 0
	for _, ws := range wss {
		waitDormant(t, ws)
		kept += jail.PrestartKept(ws)
	}
	if kept > 0 {
		t.Errorf("%d dormant workspaces still point to %d of their sandboxes", n, kept)
	}
	m.WaitTeardowns()
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d B of heap per dormant workspace", (int64(after.HeapAlloc)-int64(before.HeapAlloc))/n)
}

// netnsServe listens on 127.0.0.1:8124, says so, and answers each
// connection with its own network namespace for argv[1] seconds.
const netnsServe = `
import os, socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 8124)); s.listen(); s.settimeout(0.2)
print("listening", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.sendall(os.readlink("/proc/self/ns/net").encode()); c.close()
`

// netnsDial connects to 127.0.0.1:8124 and prints what it reads there and
// its own network namespace, or "refused".
const netnsDial = `
import os, socket
s = socket.socket()
try:
    s.connect(("127.0.0.1", 8124)); print(s.recv(100).decode(), os.readlink("/proc/self/ns/net"))
except OSError:
    print("refused")
`

// serveAt runs netnsServe on ws, with limits l, in the background, and
// waits until it listens. stop ends the server's run (its caller gives up:
// the sandbox is killed) and waits until the run has returned.
func serveAt(t *testing.T, ws *jail.Workspace, l box.Limits) (stop func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec := pySpec(netnsServe, "600")
	spec.Limits = l
	spec.Command.Stdout = w
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer w.Close()
		if _, err := ws.Run(ctx, spec); err != nil && ctx.Err() == nil {
			t.Errorf("the server's run: %v", err)
		}
	}()
	line := make([]byte, len("listening\n"))
	if _, err := io.ReadFull(r, line); err != nil || string(line) != "listening\n" {
		cancel()
		<-ended
		t.Fatalf("the server did not start: %q, %v", line, err)
	}
	return func() {
		cancel()
		<-ended
	}
}

// dial runs netnsDial on ws and reports whether it reached a server in its
// own network namespace.
func dial(t *testing.T, ws *jail.Workspace) bool {
	t.Helper()
	res := wsRun(t, ws, pySpec(netnsDial))
	f := strings.Fields(res.Stdout)
	if len(f) != 2 && res.Stdout != "refused\n" {
		t.Fatalf("dial: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	return len(f) == 2 && f[0] == f[1] && strings.HasPrefix(f[0], "net:[")
}

// TestWorkspaceDormantNetNS: a dormant workspace with no sandbox left
// drops its network namespace (one descriptor less in the store), and its
// next sandboxes share a fresh one with loopback up. One the dormancy does
// not count (here a run with another tmpfs size, which the waiting sandbox
// cannot serve) keeps it: a server it runs is still reached after the
// workspace went dormant.
func TestWorkspaceDormantNetNS(t *testing.T) {
	m, _ := newIdleManager(t, dormantIdle)
	ws := newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	waitPrestarted(t, ws)
	stored := jail.StoreFDs(m)

	stop := serveAt(t, ws, box.Limits{TmpfsSize: 32 << 20})
	waitDormant(t, ws)
	if !jail.WorkspaceHoldsNetNS(ws) {
		t.Error("a dormant workspace dropped its network namespace while a sandbox on it ran")
	}
	if !dial(t, ws) {
		t.Error("a run after the workspace went dormant did not reach the server a sandbox on it still ran")
	}
	stop()
	waitDormant(t, ws)
	waitFor(t, 20*time.Second, "the network namespace dropped", func() bool { return !jail.WorkspaceHoldsNetNS(ws) })
	if stored >= 0 {
		if n := jail.StoreFDs(m); n != stored-1 {
			t.Errorf("the store holds %d descriptors with the namespace dropped, want %d", n, stored-1)
		}
	}

	// The next sandboxes share a fresh one: a server in one is reached
	// from another, and loopback is up.
	stop = serveAt(t, ws, box.Limits{})
	if !jail.WorkspaceHoldsNetNS(ws) {
		t.Error("a workspace woken with a sandbox on it holds no network namespace")
	}
	if !dial(t, ws) {
		t.Error("after the namespace was dropped, a run did not reach the server of another run of the workspace")
	}
	if stored >= 0 {
		if n := jail.StoreFDs(m); n != stored {
			t.Errorf("the store holds %d descriptors after the wake, want %d", n, stored)
		}
	}
	stop()
}
