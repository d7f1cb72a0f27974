package jail_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// zombieChildren returns this process's children that have exited and
// were never waited for. Each holds its pid, and its place in the pids
// budget of the cgroups it ran in, until this process exits.
func zombieChildren() []int {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		st, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		// After the command's name: state, ppid, ...
		fields := strings.Fields(string(st[i+1:]))
		if len(fields) > 1 && fields[0] == "Z" && fields[1] == self {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}

// checkReaped fails t if a zombie child that is not in before is still
// there once m's teardowns are done. An init that just exited is a zombie
// until its waiter runs, so only one that stays counts.
func checkReaped(t *testing.T, m *jail.Manager, before []int) {
	t.Helper()
	m.WaitTeardowns()
	var left []int
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = slices.DeleteFunc(zombieChildren(), func(pid int) bool { return slices.Contains(before, pid) })
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("%d zombie children left: %v", len(left), left)
}

// TestEveryStartedSandboxIsReaped: whatever way a started sandbox ends
// (with its command's exit, unused, or with a command that could not
// start), its init is waited for, and no zombie of it is left to this
// process.
func TestEveryStartedSandboxIsReaped(t *testing.T) {
	m := newManager(t)
	failLimits := errors.New("limits refused")
	tests := []struct {
		name string
		path func(t *testing.T)
	}{
		{"a fresh run", func(t *testing.T) {
			if _, err := m.Run(context.Background(), sh("true")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a fresh run of a missing executable", func(t *testing.T) {
			_, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"no-such-command"}}})
			if !errors.Is(err, box.ErrCommandNotFound) {
				t.Fatalf("err %v, want ErrNotFound", err)
			}
		}},
		{"pool close with unused sandboxes", func(t *testing.T) {
			p, err := m.NewPool(2, box.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "a full pool", func() bool { return p.Ready() == 2 })
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a pooled run of a missing executable", func(t *testing.T) {
			p := newPoolOn(t, m, 1)
			_, err := runPooled(t, p, &jail.Spec{Command: box.Command{Args: []string{"no-such-command"}}})
			if !errors.Is(err, box.ErrCommandNotFound) {
				t.Fatalf("err %v, want ErrNotFound", err)
			}
		}},
		{"a pooled run cancelled before its command started", func(t *testing.T) {
			p := newPoolOn(t, m, 1)
			waitReady(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, _ = p.Run(ctx, sh("true"))
		}},
		{"a pooled sandbox that cannot take a run's limits", func(t *testing.T) {
			p := newPoolOn(t, m, 1)
			waitReady(t, p)
			jail.SetLimitsHook(m, func() error { return failLimits })
			t.Cleanup(func() { jail.SetLimitsHook(m, nil) })
			res, err := p.Run(context.Background(), &jail.Spec{Limits: box.Limits{Pids: 16}, Command: sh("true").Command})
			if err != nil || res.Prestarted {
				t.Fatalf("not run cold: %v %+v", err, res)
			}
		}},
		{"a prestarted run whose directory is missing", func(t *testing.T) {
			ws := newPrestartWorkspace(t, m, box.Limits{})
			s := inWS(ws, "pwd")
			s.Dir = "/work/no/such/dir"
			if res := wsRun(t, ws, s); res.Prestarted || res.Stdout != s.Dir+"\n" {
				t.Fatalf("not run cold in %s: %+v", s.Dir, res)
			}
		}},
		{"a prestarted run of a missing executable", func(t *testing.T) {
			ws := newPrestartWorkspace(t, m, box.Limits{})
			_, err := ws.Run(context.Background(), &jail.Spec{Workspace: ws, Command: box.Command{Args: []string{"no-such-command"}}})
			if !errors.Is(err, box.ErrCommandNotFound) {
				t.Fatalf("err %v, want ErrNotFound", err)
			}
		}},
		{"a prestarted sandbox that cannot take a run's limits", func(t *testing.T) {
			ws := newPrestartWorkspace(t, m, box.Limits{})
			jail.SetLimitsHook(m, func() error { return failLimits })
			t.Cleanup(func() { jail.SetLimitsHook(m, nil) })
			s := inWS(ws, "true")
			s.Limits.Pids = 16
			if res := wsRun(t, ws, s); res.Prestarted {
				t.Fatalf("not run cold: %+v", res)
			}
		}},
		{"workspace close with an unused prestarted sandbox", func(t *testing.T) {
			ws, err := m.NewWorkspace(0, jail.WithPrestart(box.Limits{}))
			if err != nil {
				t.Fatal(err)
			}
			waitPrestarted(t, ws)
			if err := ws.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := zombieChildren()
			tt.path(t)
			checkReaped(t, m, before)
		})
	}
}

// newPoolOn returns a pool of size on m, closed at cleanup.
func newPoolOn(t *testing.T, m *jail.Manager, size int) *jail.Pool {
	t.Helper()
	p, err := m.NewPool(size, box.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool Close: %v", err)
		}
	})
	return p
}
