package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Moving a process into a cgroup takes the kernel's cgroup_threadgroup_rwsem
// for writing. It is a per-CPU rwsem: the first writer after a quiet spell
// waits a whole RCU grace period (milliseconds) so that readers,
// every fork and exit on the host, switch to the slow path; writers that
// follow within about one more grace period pass at once. libcontainer moves
// each sandbox's init into its cgroup while the sandbox waits, so a one-shot
// run, or a daemon's first sandbox after an idle spell, pays that grace
// period in full on its critical path. Warm starts the grace period early,
// in the background, by moving something harmless of jaild's own into a
// cgroup jaild owns.

// warmHierarchies are the v1 hierarchies Warm prefers to move a thread in,
// best first: none of them accounts for anything the thread does.
var warmHierarchies = []string{"systemd", "freezer", "perf_event", "net_cls", "net_cls,net_prio", "devices"}

// setWarmTarget picks what Warm moves, and where, for a v1 parent: one
// thread of jaild into the parent's tasks file in a hierarchy that accounts
// for nothing (cgroup v1 lets one thread of a process move on its own).
func (p *Parent) setWarmTarget() {
	byName := map[string]string{}
	for _, d := range p.dirs {
		rel, err := filepath.Rel(Root, d)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(rel, "/")
		if _, err := os.Stat(filepath.Join(d, "tasks")); err == nil {
			byName[name] = d
		}
	}
	for _, name := range warmHierarchies {
		if d, ok := byName[name]; ok {
			p.warmDir = d
			return
		}
	}
}

// Warm starts, in the background, the wait that the next move of a process
// into a sandbox's cgroup would otherwise pay on its own (see above). Call it
// just before creating a sandbox. It never blocks, starts at most one move at
// a time, and does nothing where jaild owns no cgroup it could use: on v2 it
// needs the "<own>/daemon" leaf of the delegated placement, since moving
// jaild within a cgroup it did not create is not its business. On v1 it
// moves one short-lived thread of jaild into the parent in a hierarchy that
// accounts for nothing; on v2 it moves jaild into the leaf it already is in.
// Either is a no-op for the host and for the sandboxes.
func (p *Parent) Warm() {
	if p.warmDir == "" && p.warmProcs == "" {
		return
	}
	p.warmMu.Lock()
	defer p.warmMu.Unlock()
	if p.warming || p.warmDone {
		return
	}
	p.warming = true
	p.warmers.Add(1)
	go func() {
		defer p.warmers.Done()
		defer func() {
			p.warmMu.Lock()
			p.warming = false
			p.warmMu.Unlock()
		}()
		var err error
		if p.warmProcs != "" {
			err = os.WriteFile(p.warmProcs, []byte(strconv.Itoa(os.Getpid())), 0)
		} else {
			// The thread is never unlocked, so it ends with this
			// goroutine and leaves the parent with it. Except the main
			// thread, which Go never ends: it would stay in the parent
			// for good, so it is never moved.
			runtime.LockOSThread()
			tid := unix.Gettid()
			if tid == os.Getpid() {
				runtime.UnlockOSThread()
				return
			}
			err = os.WriteFile(filepath.Join(p.warmDir, "tasks"), []byte(strconv.Itoa(tid)), 0)
		}
		if err != nil {
			p.warmFailed.Add(1) // harmless: the sandbox just waits itself
		} else {
			p.warmed.Add(1)
		}
	}()
}

// WarmStats reports how many of Warm's moves were made and how many failed
// (a failed one costs nothing: the sandbox then just waits itself).
func (p *Parent) WarmStats() (made, failed int64) {
	return p.warmed.Load(), p.warmFailed.Load()
}

// rmdir removes the parent directory dir. The one Warm uses may still hold,
// for a moment, a thread Warm moved there (this jaild's or another's) on its
// way out, so a busy rmdir is retried for up to a second. Only child cgroups
// (another jaild's sandboxes) end the retries early: an empty tasks file
// does not, as the thread may have left between the failed rmdir and the
// look at the file, and the directory would be left behind.
func (p *Parent) rmdir(dir string) error {
	err := unix.Rmdir(dir)
	if dir != p.warmDir {
		return err
	}
	for deadline := time.Now().Add(time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
		if hasChildren(dir) {
			break
		}
		time.Sleep(time.Millisecond)
		err = unix.Rmdir(dir)
	}
	return err
}

// hasChildren reports whether the cgroup dir has child cgroups.
func hasChildren(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() {
			return true
		}
	}
	return false
}
