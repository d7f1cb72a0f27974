package jail_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// newPrestartWorkspace makes a workspace that keeps a sandbox started for
// its next run, and waits until one is.
func newPrestartWorkspace(t *testing.T, m *jail.Manager, l box.Limits) *jail.Workspace {
	t.Helper()
	ws := newWorkspace(t, m, 0, jail.WithPrestart(l))
	waitPrestarted(t, ws)
	return ws
}

func waitPrestarted(t *testing.T, ws *jail.Workspace) {
	t.Helper()
	waitFor(t, 20*time.Second, "a prestarted sandbox", ws.Prestarted)
}

func wsRun(t *testing.T, ws *jail.Workspace, spec *jail.Spec) *box.Result {
	t.Helper()
	res, err := ws.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Args, err)
	}
	return res
}

// TestWorkspacePrestart: a run on a workspace made WithPrestart takes the
// sandbox started for it (counted, and marked in its result), with the
// directory, environment, files, limits and fd 3 a fresh one would have
// given it; runs it cannot serve still run, in fresh sandboxes.
func TestWorkspacePrestart(t *testing.T) {
	m := newManager(t)
	ws := newPrestartWorkspace(t, m, box.Limits{})

	tests := []struct {
		name          string
		spec          func(t *testing.T) (*jail.Spec, func() string)
		wantOut       string
		wantCode      int
		wantExtra     string
		wantPrestart  bool
		wantErr       error
		wantMemory    int64
		wantTmpfsSize int64
	}{
		{
			name: "files, directory and environment",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`mkdir -p /work/d && echo one > /work/d/f && cd /work/d && pwd && echo "$X $HOME" && id -un && [ ! -e /dev/fd/3 ] && echo no-fd3`)
				s.Env = []string{"X=1"}
				return s, nil
			},
			wantOut: "/work/d\n1 /work\nsandbox\nno-fd3\n", wantPrestart: true,
		},
		{
			name: "a directory below /work, the next sandbox sees the files",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`pwd; cat f; exit 3`)
				s.Dir = "/work/d"
				return s, nil
			},
			wantOut: "/work/d\none\n", wantCode: 3, wantPrestart: true,
		},
		{
			name: "stdin",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`cat`)
				s.Stdin = strings.NewReader("fed\n")
				return s, nil
			},
			wantOut: "fed\n", wantPrestart: true,
		},
		{
			name: "the write end of a pipe is fd 3",
			spec: func(t *testing.T) (*jail.Spec, func() string) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); w.Close() })
				got := make(chan string, 1)
				go func() { b, _ := io.ReadAll(r); got <- string(b) }()
				s := sh(`echo report >&3; echo ok`)
				s.ExtraFiles = []*os.File{w}
				return s, func() string { w.Close(); return <-got }
			},
			wantOut: "ok\n", wantExtra: "report\n", wantPrestart: true,
		},
		{
			name: "other memory limit, set on the cgroup",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`echo ok`)
				s.Limits.Memory = 96 << 20
				return s, nil
			},
			wantOut: "ok\n", wantPrestart: true, wantMemory: 96 << 20,
		},
		{
			name: "other tmpfs size: a fresh sandbox",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`cat /work/d/f`)
				s.Limits.TmpfsSize = 8 << 20
				return s, nil
			},
			wantOut: "one\n", wantTmpfsSize: 8 << 20,
		},
		{
			name: "a missing directory: a fresh sandbox, as before",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				s := sh(`pwd`)
				s.Dir = "/work/new"
				return s, nil
			},
			wantOut: "/work/new\n",
		},
		{
			name: "a missing command",
			spec: func(*testing.T) (*jail.Spec, func() string) {
				return &jail.Spec{Command: box.Command{Args: []string{"no-such-command"}}}, nil
			},
			wantErr: box.ErrCommandNotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			waitPrestarted(t, ws)
			hits, _ := jail.PrestartStats(ws)
			spec, extra := tc.spec(t)
			res, err := ws.Run(context.Background(), spec)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Stdout != tc.wantOut || res.ExitCode != tc.wantCode {
				t.Errorf("got %q exit %d (stderr %q), want %q exit %d", res.Stdout, res.ExitCode, res.Stderr, tc.wantOut, tc.wantCode)
			}
			if extra != nil {
				if got := extra(); got != tc.wantExtra {
					t.Errorf("fd 3 got %q, want %q", got, tc.wantExtra)
				}
			}
			after, _ := jail.PrestartStats(ws)
			if res.Prestarted != tc.wantPrestart || (after == hits+1) != tc.wantPrestart {
				t.Errorf("Prestarted %v, hits %d -> %d; want prestarted %v", res.Prestarted, hits, after, tc.wantPrestart)
			}
			if tc.wantMemory != 0 && res.Limits.Memory != tc.wantMemory {
				t.Errorf("result limits %+v, want memory %d", res.Limits, tc.wantMemory)
			}
			if tc.wantTmpfsSize != 0 && res.Limits.TmpfsSize != tc.wantTmpfsSize {
				t.Errorf("result limits %+v, want tmpfs %d", res.Limits, tc.wantTmpfsSize)
			}
		})
	}
}

// TestWorkspacePrestartIsolation: a fork bomb that hits the pids limit in
// one run leaves the next run, on the next prestarted sandbox, working,
// and that sandbox sees none of the previous run's processes.
func TestWorkspacePrestartIsolation(t *testing.T) {
	m := newManager(t)
	ws := newPrestartWorkspace(t, m, box.Limits{Pids: 32})

	bomb := sh(`sleep 1000 & b() { b | b & }; b; sleep 2`)
	bomb.Timeout = 5 * time.Second
	res := wsRun(t, ws, bomb)
	if !res.Prestarted || !res.PidsLimitHit {
		t.Fatalf("fork bomb: prestarted %v, pids limit hit %v: %+v", res.Prestarted, res.PidsLimitHit, res)
	}
	waitPrestarted(t, ws)
	res = wsRun(t, ws, sh(`echo /proc/[0-9]*; cat /proc/[0-9]*/cmdline | tr '\0' ' '; echo; echo alive`))
	if !res.Prestarted || res.ExitCode != 0 {
		t.Fatalf("after the bomb: %+v", res)
	}
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 3 || lines[2] != "alive" || strings.Contains(res.Stdout, "sleep") {
		t.Errorf("the next sandbox's processes: %q", res.Stdout)
	}
	// The shell (pid 1), the glob's echo is a builtin; cat and tr.
	if pids := strings.Fields(lines[0]); len(pids) > 3 {
		t.Errorf("the next sandbox sees %d processes: %v", len(pids), pids)
	}
}

// TestWorkspacePrestartInvalid: limits a sandbox cannot have are refused
// before anything is made.
func TestWorkspacePrestartInvalid(t *testing.T) {
	m := newManager(t)
	if _, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{Pids: -1})); !box.IsInvalid(err) {
		t.Errorf("NewWorkspace with invalid prestart limits = %v, want invalid", err)
	}
}

// TestWorkspacePrestartClose: closing a workspace whose sandbox waits, or
// is being built right after a run took the last one, leaves nothing
// (newManager's testenv checks the host).
func TestWorkspacePrestartClose(t *testing.T) {
	m := newManager(t)
	for _, runFirst := range []bool{false, true} {
		ws, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{}))
		if err != nil {
			t.Fatal(err)
		}
		waitPrestarted(t, ws)
		if runFirst {
			if res := wsRun(t, ws, sh(`true`)); !res.Prestarted {
				t.Errorf("not prestarted: %+v", res)
			}
		}
		if err := ws.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if ws.Prestarted() {
			t.Error("a sandbox waits on a closed workspace")
		}
	}
}

// TestWorkspacePrestartProxy: the prestarted sandbox of a workspace made
// WithProxy gets the proxy variables and reaches the listener in the
// workspace's namespace, as a fresh one does.
func TestWorkspacePrestartProxy(t *testing.T) {
	m := newManager(t)
	ws := newWorkspace(t, m, 0, jail.WithProxy(), jail.WithPrestart(box.Limits{}))
	ln := ws.TakeProxyListener()
	if ln == nil {
		t.Fatal("no proxy listener")
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("proxy\n"))
			c.Close()
		}
	}()
	script := `env | grep -i _proxy= | sort; exec 3<>/dev/tcp/127.0.0.1/3128; cat <&3`
	fresh := run(t, m, inWS(ws, "bash -c '"+script+"'"))
	waitPrestarted(t, ws)
	res := wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"bash", "-c", script}}})
	if !res.Prestarted || res.Stdout != fresh.Stdout || !strings.Contains(res.Stdout, "HTTPS_PROXY=http://127.0.0.1:3128\n") ||
		!strings.HasSuffix(res.Stdout, "proxy\n") {
		t.Errorf("prestarted %v: %q (stderr %q); a fresh sandbox: %q", res.Prestarted, res.Stdout, res.Stderr, fresh.Stdout)
	}
}

// TestWorkspacePrestartHot: runs back to back make a workspace keep more
// than one sandbox started, and an idle one goes back to one, destroying
// the others.
func TestWorkspacePrestartHot(t *testing.T) {
	m := newManager(t)
	ws := newPrestartWorkspace(t, m, box.Limits{})
	for range 3 {
		wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"true"}}})
	}
	if _, want := jail.PrestartCounts(ws); want < 2 {
		t.Fatalf("after runs back to back, keeps %d sandboxes; want more than one", want)
	}
	waitFor(t, 20*time.Second, "more than one ready sandbox", func() bool { r, _ := jail.PrestartCounts(ws); return r > 1 })
	waitFor(t, 4*jail.HotWindow+20*time.Second, "one ready sandbox once idle", func() bool {
		r, want := jail.PrestartCounts(ws)
		return r == 1 && want == 1
	})
	if res := wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"true"}}}); !res.Prestarted {
		t.Errorf("after cooling down, a run was not prestarted: %+v", res)
	}
}

// TestWorkspacePrestartAtOnce: a run that ends while another run of its
// workspace is under way holds its replacement's build back, until the
// other ends or 50 ms after its take: the build's burst of CPU does not
// compete with runs at once. The bound holds: the build starts while the
// long run still runs.
func TestWorkspacePrestartAtOnce(t *testing.T) {
	m := newManager(t)
	var (
		mu     sync.Mutex
		builds []time.Time
	)
	jail.SetPrestartHook(m, func() {
		mu.Lock()
		builds = append(builds, time.Now())
		mu.Unlock()
	})
	ws := newPrestartWorkspace(t, m, box.Limits{})
	for range 3 {
		wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"true"}}})
	}
	// Settled: every sandbox the hot workspace keeps is ready, and no
	// build is under way, so that the next build is the long run's.
	waitFor(t, 20*time.Second, "the hot workspace's sandboxes ready", func() bool {
		r, want := jail.PrestartCounts(ws)
		building, _ := jail.PrestartState(ws)
		return want > 2 && r == want && building == 0
	})

	mu.Lock()
	builds = nil
	mu.Unlock()
	long := make(chan *box.Result, 1)
	go func() {
		res, err := ws.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"sleep", "0.6"}}})
		if err != nil {
			t.Errorf("the long run: %v", err)
		}
		long <- res
	}()
	// The long run's own replacement starts 50 ms after its take; the
	// builds counted below are those started once it and every other
	// build under way have ended.
	waitFor(t, 10*time.Second, "the long run's replacement built", func() bool {
		mu.Lock()
		started := len(builds) > 0
		mu.Unlock()
		building, _ := jail.PrestartState(ws)
		return started && building == 0
	})
	mu.Lock()
	builds = nil
	mu.Unlock()
	start := time.Now()
	short := wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"true"}}})
	shortTook := time.Since(start)
	res := <-long
	longEnded := time.Now()
	if !short.Prestarted || res == nil || !res.Prestarted {
		t.Fatalf("the runs were not both prestarted: %+v, %+v", short, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(builds) == 0 {
		t.Fatal("no build started after the short run while the long one ran")
	}
	first := builds[0].Sub(start)
	t.Logf("short run %v; first build %v after its start; long run ended %v after it", shortTook, first, longEnded.Sub(start))
	if first < 45*time.Millisecond {
		t.Errorf("a replacement build started %v after the short run began (it took %v), beside the long run: want it held back ~50 ms", first, shortTook)
	}
	if builds[0].After(longEnded) {
		t.Errorf("the short run's replacement waited for the long run's end (%v after the short run began): want at most ~50 ms after its take", first)
	}
}
