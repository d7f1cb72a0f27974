package jail_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// densityWorkspaces is how many idle prestarted workspaces the density
// tests hold at once: enough that a cost per workspace shows as a multiple
// of it.
const densityWorkspaces = 12

// newDensityManager is newManager with the installation, whose state dir
// the mount test looks under.
func newDensityManager(t *testing.T) (*jail.Manager, *testenv.Install) {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m, env
}

// idleWorkspaces makes n workspaces that each keep a sandbox started, as
// idle sessions do, and waits until every one has it.
func idleWorkspaces(t *testing.T, m *jail.Manager, n int) []*jail.Workspace {
	t.Helper()
	var wss []*jail.Workspace
	for range n {
		wss = append(wss, newWorkspace(t, m, 0, jail.WithPrestart(box.Limits{})))
	}
	for _, ws := range wss {
		waitPrestarted(t, ws)
	}
	return wss
}

// TestWorkspaceMountsFlat: idle workspaces add nothing to jaild's mount
// table, which every new sandbox's mount namespace starts as a copy of:
// no mount in the state dir (where a host-mounted workspace and a pinned
// network namespace go), none naming a workspace, and their sandboxes
// still see their own /work.
func TestWorkspaceMountsFlat(t *testing.T) {
	m, env := newDensityManager(t)
	if !jail.DetachedWorkspaces(m) {
		t.Skip("this kernel cannot bind a detached mount into a sandbox: workspaces are mounted on the host")
	}
	before := testenv.MountsUnder(env.StateDir)
	wss := idleWorkspaces(t, m, densityWorkspaces)
	if got := testenv.MountsUnder(env.StateDir); len(got) != len(before) {
		t.Errorf("%d idle workspaces: mounts under the state dir %v, before %v", len(wss), got, before)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range wss {
		if strings.Contains(string(data), ws.ID()) {
			t.Errorf("workspace %s is in the mount table", ws.ID())
		}
		if !strings.HasPrefix(ws.Dir(), "/proc/") {
			t.Errorf("Dir %s: want the path of jaild's descriptor", ws.Dir())
		}
	}
	// Each sandbox sees its own workspace, and the host its files.
	for i, ws := range wss[:3] {
		want := ws.ID()
		res := wsRun(t, ws, &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "echo " + want + " > /work/id; cat /work/id"}}})
		if strings.TrimSpace(res.Stdout) != want {
			t.Errorf("workspace %d: %q, want %q", i, res.Stdout, want)
		}
		if data, err := os.ReadFile(ws.Dir() + "/id"); err != nil || strings.TrimSpace(string(data)) != want {
			t.Errorf("workspace %d: the host reads %q, %v", i, data, err)
		}
	}
}

// TestWorkspaceFDs: an idle workspace with its waiting sandbox holds at
// most jail.IdleWorkspaceFDs descriptors in jaild's file table, what a
// waiting sandbox holds (see warm); its slot lock, tmpfs and network
// namespace are in the descriptor store, out of the table that each
// sandbox start copies. The namespaces of the waiting sandbox are pinned
// only when its command comes.
func TestWorkspaceFDs(t *testing.T) {
	m, _ := newDensityManager(t)
	// One first, so that what jaild opens once (the watchdog, cgroup
	// files, the store) is not counted.
	idleWorkspaces(t, m, 1)
	m.WaitTeardowns()
	before, storedBefore := openFDs(t), jail.StoreFDs(m)
	wss := idleWorkspaces(t, m, densityWorkspaces)
	each := jail.StoredWorkspaceFDs(jail.DetachedWorkspaces(m))
	if stored := jail.StoreFDs(m) - storedBefore; stored != len(wss)*each {
		t.Errorf("%d workspaces put %d descriptors in the store, want %d each", len(wss), stored, each)
	}
	// Idle: libcontainer's mount source thread closes a started
	// sandbox's mount namespace descriptor a moment after its start has
	// returned, so the count may take that moment to settle.
	bound := len(wss) * jail.IdleWorkspaceFDs
	var after int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if after = openFDs(t); after-before <= bound || time.Now().After(deadline) {
			break
		}
	}
	per := float64(after-before) / float64(len(wss))
	t.Logf("%d idle workspaces: %d descriptors, %.2f each (bound %d)", len(wss), after-before, per, jail.IdleWorkspaceFDs)
	if after-before > bound {
		t.Errorf("%d idle workspaces hold %d descriptors: %.2f each, over the bound of %d", len(wss), after-before, per, jail.IdleWorkspaceFDs)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
