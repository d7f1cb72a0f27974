package jail_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// TestPrestartGate: with Config.PrestartBuilds 1, workspaces' prestarted
// builds that no run waits for are made one at a time; a run on a
// workspace whose build is queued lets that build through at once; a
// workspace closed while its build is queued closes without waiting, and
// that build is never made; the others are made in the end, and nothing
// is left.
func TestPrestartGate(t *testing.T) {
	m, env := newManagerWith(t, func(cfg *jail.Config) { cfg.PrestartBuilds = 1 })
	leftovers := snapshotLeftovers(env)

	// While holding, each build that reaches the hook (the gate let it
	// by) is handed to the test and waits for its release; a failed
	// test's builds go on after 30 s, so that its cleanup ends.
	type build struct {
		ws      *jail.Workspace
		release chan struct{}
	}
	var (
		holding atomic.Bool
		bBuilds atomic.Int32
		b       *jail.Workspace
		bSet    = make(chan struct{})
	)
	holding.Store(true)
	builds := make(chan build, 16)
	jail.SetPrestartWorkspaceHook(m, func(ws *jail.Workspace) {
		select {
		case <-bSet:
			if ws == b {
				bBuilds.Add(1)
			}
		default:
		}
		if !holding.Load() {
			return
		}
		b := build{ws, make(chan struct{})}
		builds <- b
		select {
		case <-b.release:
		case <-time.After(30 * time.Second):
		}
	})
	next := func(what string) build {
		t.Helper()
		select {
		case b := <-builds:
			return b
		case <-time.After(10 * time.Second):
			t.Fatalf("no build reached the gate's far side: %s", what)
			return build{}
		}
	}

	a := newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	first := next("the first workspace's")
	if first.ws != a {
		t.Fatalf("the first build let by is not the first workspace's")
	}
	b = newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	close(bSet)
	c := newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{}))
	select {
	case o := <-builds:
		close(o.release)
		t.Fatalf("a second build was let by while the first was under way (b's: %v, c's: %v)", o.ws == b, o.ws == c)
	case <-time.After(500 * time.Millisecond):
	}

	// A run on c waits for c's queued build, which goes through at once.
	ran := make(chan *box.Result, 1)
	go func() {
		res, err := c.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"true"}}})
		if err != nil {
			t.Errorf("the run on c: %v", err)
		}
		ran <- res
	}()
	hurried := next("the build a run waits for")
	if hurried.ws != c {
		t.Fatalf("the build let by for the run on c is not c's (a's: %v, b's: %v)", hurried.ws == a, hurried.ws == b)
	}
	close(hurried.release)
	if res := <-ran; res == nil || !res.Prestarted || res.ExitCode != 0 {
		t.Fatalf("the run on c did not run on c's hurried build: %+v", res)
	}

	// b closes while its build is queued behind a's, held: without
	// waiting for it, and with its build never made.
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("closing b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("closing a workspace whose build was queued waited for another workspace's build")
	}

	holding.Store(false)
	close(first.release)
	waitPrestarted(t, a)
	waitPrestarted(t, c) // the replacement of the sandbox its run took
	if n := bBuilds.Load(); n > 0 {
		t.Errorf("%d builds of b were made after it closed", n)
	}
	for _, ws := range []*jail.Workspace{a, c} {
		if err := ws.Close(); err != nil {
			t.Fatalf("Workspace.Close: %v", err)
		}
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
