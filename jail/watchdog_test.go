package jail_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// startHelper starts helperRun (a stand-in for `jaild run`) on env and
// returns once its sandbox runs.
func startHelper(t *testing.T, env *testenv.Install) *exec.Cmd {
	t.Helper()
	return testenv.StartHelper(t, env, "helper-run")
}

// waitFor polls cond until it holds or d has passed, and fails t then.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKilledOwner SIGKILLs a process that runs a sandbox with an hour to go,
// with no other jaild on the installation, and checks that the sandbox dies
// promptly anyway: its watchdog tears it down, and the parent cgroup with
// it, without any other jaild's sweep.
func TestKilledOwner(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	owner := startHelper(t, env)
	name := filepath.Base(env.Parent)
	if n := len(testenv.ProcsInCgroup(name)); n < 2 {
		t.Fatalf("expected the sandbox's two processes, found %v", testenv.ProcsInCgroup(name))
	}
	dogs := testenv.WatchdogsOf(env.StateDir, owner.Process.Pid)
	if len(dogs) != 1 {
		t.Fatalf("owner has watchdogs %v, want one", dogs)
	}
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	killed := time.Now()
	waitFor(t, 2*time.Second, "the orphaned sandbox's processes to die", func() bool {
		return len(testenv.ProcsInCgroup(name)) == 0
	})
	t.Logf("sandbox gone %v after its owner", time.Since(killed).Round(time.Millisecond))
	// Then the rest of the teardown, and the watchdog itself: after it the
	// installation must pass testenv's leak check as it is.
	waitFor(t, 5*time.Second, "the watchdog to finish", func() bool {
		return len(testenv.Watchdogs(env.StateDir)) == 0
	})
	if s := testenv.CgroupsNamed(name); len(s) > 0 {
		t.Errorf("cgroups left after the watchdog: %v", s)
	}
	if s := testenv.Slots(env.StateDir); len(s) > 0 {
		t.Errorf("slots left after the watchdog: %v", s)
	}
}

// TestWatchdogPerManager: each Manager has one watchdog while it is open and
// none once it is closed, however many Managers a process opens.
func TestWatchdogPerManager(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	const n = 4
	var ms []*jail.Manager
	for i := 0; i < n; i++ {
		m, err := jail.New(config(env))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		ms = append(ms, m)
		if res, err := m.Run(context.Background(), sh("echo ok")); err != nil || res.Stdout != "ok\n" {
			t.Fatalf("run: %v %+v", err, res)
		}
	}
	if dogs := testenv.WatchdogsOf(env.StateDir, os.Getpid()); len(dogs) != n {
		t.Errorf("%d open Managers have watchdogs %v", n, dogs)
	}
	for _, m := range ms {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
	if dogs := testenv.Watchdogs(env.StateDir); len(dogs) > 0 {
		t.Errorf("watchdogs left after Close: %v", dogs)
	}
	// A Manager closed before its watchdog was even started leaves none.
	for i := 0; i < n; i++ {
		m, err := jail.New(config(env))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
	if dogs := testenv.Watchdogs(env.StateDir); len(dogs) > 0 {
		t.Errorf("watchdogs left after New and Close: %v", dogs)
	}
}

// TestWatchdogRestart: a Manager whose watchdog dies starts another, which
// still guards its sandboxes.
func TestWatchdogRestart(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := m.Run(context.Background(), sh("true")); err != nil {
		t.Fatal(err)
	}
	first := testenv.WatchdogsOf(env.StateDir, os.Getpid())
	if len(first) != 1 {
		t.Fatalf("watchdogs %v, want one", first)
	}
	if err := syscall.Kill(first[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next []int
	waitFor(t, 5*time.Second, "another watchdog", func() bool {
		next = testenv.WatchdogsOf(env.StateDir, os.Getpid())
		return len(next) == 1 && next[0] != first[0]
	})
	if res, err := m.Run(context.Background(), sh("echo ok")); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("run after restart: %v %+v", err, res)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if dogs := testenv.Watchdogs(env.StateDir); len(dogs) > 0 {
		t.Errorf("watchdogs left after Close: %v", dogs)
	}
}
