package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// init pins the main goroutine to the main thread, as jaild's main does, so
// that no other goroutine, Warm's included, ever runs there.
func init() { runtime.LockOSThread() }

func testParent(t testing.TB) *Parent {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	mode, err := Detect()
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "jaild-cgtest-" + hex.EncodeToString(b)
	if mode == V2 {
		name = "/" + name
	}
	p, err := Open(Options{
		Path:    name,
		LockDir: t.TempDir(),
		Budget:  Budget{Memory: 512 << 20, Pids: 1000, CPUs: 1.5},
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, d := range p.Dirs() {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("parent cgroup %s left behind", d)
			}
		}
	})
	return p
}

func TestParentBudget(t *testing.T) {
	p := testParent(t)
	var memFile, pidsFile, want string
	for _, d := range p.Dirs() {
		switch {
		case p.Mode() == V2:
			memFile, pidsFile, want = filepath.Join(d, "memory.max"), filepath.Join(d, "pids.max"), "536870912"
		case filepath.Base(filepath.Dir(d)) == "memory" || contains(d, "/memory/"):
			memFile, want = filepath.Join(d, "memory.limit_in_bytes"), "536870912"
		case contains(d, "/pids/"):
			pidsFile = filepath.Join(d, "pids.max")
		}
	}
	if got := readTrim(t, memFile); got != want {
		t.Errorf("%s = %s, want %s", memFile, got, want)
	}
	if got := readTrim(t, pidsFile); got != "1000" {
		t.Errorf("%s = %s, want 1000", pidsFile, got)
	}
}

// TestRemoveOrphan puts a live process into a child cgroup, as a dead
// jaild's sandbox would be left, and checks that Remove kills it and
// removes the cgroup in every hierarchy.
func TestRemoveOrphan(t *testing.T) {
	p := testParent(t)
	g := mkGroup(t, p, "orphan")
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pid := []byte(strconv.Itoa(sleeper.Process.Pid))
	for _, d := range g.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0); err != nil {
			t.Fatalf("move sleeper into %s: %v", d, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := <-done; err == nil {
		t.Errorf("sleeper exited cleanly; want it killed")
	}
	for _, d := range g.Dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s still exists", d)
		}
	}
	// Removing what is already gone is not an error.
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestReadUsage reads the counters of a cgroup a process ran in, through
// counter files opened before it ran (as a sandbox does) and afresh.
func TestReadUsage(t *testing.T) {
	p := testParent(t)
	g := mkGroup(t, p, "usage")
	c, err := g.OpenCounters()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if before.CPU != 0 || before.MemoryPeak != 0 {
		t.Errorf("usage of an unused cgroup %+v, want none", before)
	}
	// A shell that moves itself into the cgroup, then burns a little CPU.
	script := "for f in " + joinProcs(g.Dirs) + "; do echo $$ > $f; done; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The files opened before are read from their start again: what they
	// say now, not what they said at the first read.
	u, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 || u.MemoryPeak <= 0 || u.OOMKills != 0 || u.PidsMax != 0 {
		t.Errorf("usage %+v: want CPU and memory used, no OOM kill, no refused fork", u)
	}
	fresh, err := g.Read()
	if err != nil {
		t.Fatal(err)
	}
	if fresh != u {
		t.Errorf("read through new files %+v, through the open ones %+v", fresh, u)
	}
	// A cgroup that is not there is an error, not a zero usage.
	if u, err := p.Child("absent").Read(); err == nil {
		t.Errorf("Read of a missing cgroup: %+v, want an error", u)
	}
}

// mkGroup creates the child cgroup name of p the way libcontainer would,
// and removes it at cleanup.
func mkGroup(t testing.TB, p *Parent, name string) *Group {
	t.Helper()
	g := p.Child(name)
	t.Cleanup(func() { _ = g.Remove() })
	for _, d := range g.Dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		// A new v1 cpuset cgroup has no cpus or mems until given its
		// parent's; attaching a process before that fails with ENOSPC.
		if p.Mode() != V1 {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if data, err := os.ReadFile(filepath.Join(filepath.Dir(d), f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), data, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return g
}

func joinProcs(dirs []string) string {
	s := ""
	for _, d := range dirs {
		s += " " + filepath.Join(d, "cgroup.procs")
	}
	return s
}

func readTrim(t *testing.T, f string) string {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(trimSpace(data))
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

func contains(s, sub string) bool { return len(s) >= len(sub) && indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestKeepBudget: a second user that joins with Keep leaves the first
// user's budget in place; one without Keep applies its own.
func TestKeepBudget(t *testing.T) {
	p := testParent(t) // pids budget 1000
	pidsFile := ""
	for _, d := range p.Dirs() {
		if p.Mode() == V2 || contains(d, "/pids/") {
			pidsFile = filepath.Join(d, "pids.max")
		}
	}
	lockDir := t.TempDir()
	path := p.Path()
	q, err := Open(Options{Path: path, LockDir: lockDir, Budget: Budget{Pids: 500}, Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := readTrim(t, pidsFile); got != "1000" {
		t.Errorf("after joining with Keep: pids.max %s, want 1000", got)
	}
	r, err := Open(Options{Path: path, LockDir: lockDir, Budget: Budget{Pids: 500}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := readTrim(t, pidsFile); got != "500" {
		t.Errorf("after joining without Keep: pids.max %s, want 500", got)
	}
}

// TestWarm checks that Warm moves a thread of this process, never the
// process itself, into a hierarchy that accounts for nothing, one move at a
// time, and that the moved thread is gone in time for Close to remove the
// parent (testParent's cleanup asserts that).
func TestWarm(t *testing.T) {
	p := testParent(t) // Open warms once on v1
	if p.Mode() == V2 {
		t.Skip("on v2 Warm only acts in the delegated daemon leaf, which a test cannot own")
	}
	if p.warmDir == "" {
		t.Fatalf("no hierarchy to warm among %v", p.Dirs())
	}
	if h := filepath.Base(filepath.Dir(p.warmDir)); h == "memory" || h == "cpu" || h == "pids" || h == "cpuacct" {
		t.Errorf("warm hierarchy %s accounts for the moved thread", h)
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var callers sync.WaitGroup
	for range 20 {
		callers.Go(p.Warm)
	}
	callers.Wait()
	p.warmers.Wait()
	p.Warm()
	p.warmers.Wait()
	if n, failed := p.warmed.Load(), p.warmFailed.Load(); n < 2 || failed != 0 {
		t.Errorf("warm moves: %d made, %d failed; want at least 2 made, none failed", n, failed)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("Warm moved the process itself:\nbefore %s\nafter %s", before, after)
	}
}

// BenchmarkGroupRead measures reading a sandbox's usage, which every run
// does once, after its command ends and before its cgroup goes.
func BenchmarkGroupRead(b *testing.B) {
	g := mkGroup(b, testParent(b), "bench-read")
	for b.Loop() {
		if _, err := g.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCloseTogether: users of one parent (a daemon's front end and its
// worker, other daemons) that close at the same moment leave no directory
// behind: one of them finds itself the last user.
func TestCloseTogether(t *testing.T) {
	p := testParent(t)
	lockDir := t.TempDir()
	for round := 0; round < 100; round++ {
		var users [8]*Parent
		for i := range users {
			u, err := Open(Options{Path: p.Path(), LockDir: lockDir, Budget: Budget{Pids: 100}})
			if err != nil {
				t.Fatal(err)
			}
			users[i] = u
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := u.Close(); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, d := range users[0].Dirs() {
			if _, err := os.Stat(d); err == nil {
				t.Fatalf("round %d: %s left behind by %d users closing together", round, d, len(users))
			}
		}
	}
}
