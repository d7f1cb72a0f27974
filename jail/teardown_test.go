package jail_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// TestTeardownAfterAnswer: a run returns its complete result before its
// sandbox is destroyed, at most TeardownBacklog sandboxes wait to be
// destroyed (a run beyond it destroys its own before it returns), and every
// one is destroyed in the end: testenv's leak check runs at cleanup.
func TestTeardownAfterAnswer(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cfg := config(env)
	cfg.TeardownBacklog = 2
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	jail.SetTeardownHook(m, func(string) { <-gate })
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	t.Cleanup(func() {
		open()
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	run := func() *box.Result {
		t.Helper()
		res, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{
			Args: []string{"/bin/sh", "-c", "echo out; head -c 4000000 /dev/zero > /tmp/f; exit 3"},
		}})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		// The verdict is complete although the sandbox may still exist.
		if res.ExitCode != 3 || res.Stdout != "out\n" || res.CPUTime <= 0 || res.MemoryPeak < 4000000 {
			t.Fatalf("incomplete result: exit %d, stdout %q, cpu %v, memory peak %d", res.ExitCode, res.Stdout, res.CPUTime, res.MemoryPeak)
		}
		return res
	}
	var held []string
	for i := range 2 {
		res := run()
		held = append(held, res.ID)
		if n := jail.TearingDown(m); n != i+1 {
			t.Fatalf("after run %d: %d teardowns in progress, want %d", i+1, n, i+1)
		}
		if len(testenv.CgroupsNamed(res.ID)) == 0 {
			t.Fatalf("run %d: its sandbox's cgroup is gone before the teardown was let go", i+1)
		}
	}
	// The backlog is full: the third run destroys its sandbox first.
	res := run()
	if n := jail.TearingDown(m); n != 2 {
		t.Fatalf("after a run with the backlog full: %d teardowns in progress, want 2", n)
	}
	if s := testenv.CgroupsNamed(res.ID); len(s) > 0 {
		t.Fatalf("a run beyond the backlog returned before its teardown: %v", s)
	}
	open()
	m.WaitTeardowns()
	for _, id := range held {
		if s := testenv.CgroupsNamed(id); len(s) > 0 {
			t.Errorf("sandbox %s: cgroups left after its teardown: %v", id, s)
		}
	}
	if n := jail.TearingDown(m); n != 0 {
		t.Errorf("%d teardowns still counted after they finished", n)
	}
}

// TestTeardownCrash: a jaild that dies while sandboxes wait for their
// background teardown leaves nothing behind: its watchdog destroys them at
// once, or, if the watchdog died with it, the next start's sweep does.
func TestTeardownCrash(t *testing.T) {
	for _, withDog := range []bool{true, false} {
		name := map[bool]string{true: "watchdog", false: "next start"}[withDog]
		t.Run(name, func(t *testing.T) {
			requireHost(t)
			env := testenv.New(t, "jaild-test")
			owner := testenv.StartHelper(t, env, "helper-teardown")
			if n := len(testenv.Slots(env.StateDir)); n != 2 {
				t.Fatalf("want the helper's two sandboxes waiting for their teardown, found %d slots", n)
			}
			if withDog {
				if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = owner.Wait()
				waitFor(t, 10*time.Second, "the watchdog to finish", func() bool {
					return len(testenv.Watchdogs(env.StateDir)) == 0
				})
			} else {
				testenv.KillWithWatchdog(t, env, owner)
				if n := len(testenv.Slots(env.StateDir)); n != 2 {
					t.Fatalf("before the next start: %d slots, want the 2 left", n)
				}
				m, err := jail.New(config(env))
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if s := testenv.Slots(env.StateDir); len(s) > 0 {
				t.Errorf("slots left: %v", s)
			}
		})
	}
}

// helperTeardown is a jaild whose background teardowns never finish: it
// runs two commands, says so once both answered, and waits to be killed.
func helperTeardown() {
	m, err := jail.New(jail.Config{StateDir: os.Getenv("JAILD_TEST_STATE"), CgroupParent: os.Getenv("JAILD_TEST_PARENT")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	jail.SetTeardownHook(m, func(string) { select {} })
	for range 2 {
		if _, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"true"}}}); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
	}
	fmt.Println("started")
	select {}
}
