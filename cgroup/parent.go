package cgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// DefaultName is the parent's name when none is configured.
const DefaultName = "jaild"

// Parent is the cgroup that holds all of one jaild installation's sandboxes
// and carries their aggregate budget. Several jaild processes (a daemon and
// one-shot runs) share it. Each user holds a shared flock per directory of
// the parent, and whoever closes last for a directory removes it: on a v1
// host two jaild processes can share the pids hierarchy's parent but not the
// memory one (when they sit in different memory cgroups), so one lock for
// the whole parent would leak or race.
type Parent struct {
	mode Mode
	// path is the parent as libcontainer's configs.Cgroup.Path takes it:
	// relative on v1 (nested under jaild's own cgroups), absolute on v2.
	path  string
	dirs  []string   // absolute directories of the parent
	locks []*os.File // one per dir, same order

	// What Warm moves where: a thread into warmDir's tasks (v1), or
	// jaild into warmProcs, the cgroup.procs of the leaf it is in (v2).
	warmDir, warmProcs string
	warmMu             sync.Mutex // guards the two below, and orders warmers.Add before Close's Wait
	warming, warmDone  bool       // a move is under way; Close has begun
	warmers            sync.WaitGroup
	warmed, warmFailed atomic.Int64 // moves made and moves that failed
}

// Options configure [Open].
type Options struct {
	// Path overrides the parent's placement: a path relative to jaild's
	// own cgroup on v1, an absolute path below /sys/fs/cgroup on v2.
	// Empty means
	// automatic (see the package doc), with DefaultName.
	Path string
	// LockDir holds the lock files whose shared flocks mark the users of
	// each parent directory. Required; it must be the same for every
	// jaild process that shares the parent.
	LockDir string
	// Budget is applied to the parent when Open creates it, and when it
	// joins an existing one unless Keep is set.
	Budget Budget
	Keep   bool
}

// Open creates (or joins) the parent cgroup and applies the budget.
func Open(opts Options) (_ *Parent, retErr error) {
	mode, err := Detect()
	if err != nil {
		return nil, err
	}
	p := &Parent{mode: mode}
	defer func() {
		if retErr != nil {
			p.unlock()
		}
	}()
	if mode == V2 {
		err = p.openV2(opts)
	} else {
		err = p.openV1(opts)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// lock takes a shared flock for each of p.dirs, waiting out a jaild that is
// removing one of them, so that nothing removes them while p uses them.
func (p *Parent) lock(lockDir string) error {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return fmt.Errorf("create cgroup lock dir: %w", err)
	}
	for _, d := range p.dirs {
		name := lockName(lockDir, d)
		f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return fmt.Errorf("open cgroup lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", name, err)
		}
		p.locks = append(p.locks, f)
	}
	return nil
}

// lockName is the lock file that marks the users of the parent directory d.
func lockName(lockDir, d string) string {
	sum := sha256.Sum256([]byte(d))
	return filepath.Join(lockDir, hex.EncodeToString(sum[:8])+".lock")
}

func (p *Parent) unlock() {
	for _, f := range p.locks {
		f.Close()
	}
	p.locks = nil
}

func (p *Parent) openV1(opts Options) error {
	p.path = opts.Path
	if p.path == "" {
		p.path = DefaultName
	}
	p.path = strings.Trim(filepath.Clean(p.path), "/")
	if p.path == "" || p.path == "." || strings.HasPrefix(p.path, "..") {
		return fmt.Errorf("cgroup parent %q: must name a cgroup below jaild's own", opts.Path)
	}
	dirs, err := v1Dirs(p.path)
	if err != nil {
		return err
	}
	p.dirs = dirs
	if err := p.lock(opts.LockDir); err != nil {
		return err
	}
	keep := opts.Keep && p.exists()
	if !keep {
		// The directories first, in every hierarchy: containerd skips
		// those without a controller it drives (the named systemd one, a
		// hybrid host's unified one), and libcontainer creates sandboxes
		// there too.
		for _, d := range p.dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("create cgroup %s: %w", d, err)
			}
		}
	}
	// Warm holds the kernel's cgroup_mutex until its wait ends, which
	// stalls every mkdir but not the budget's writes: warm up now, so the
	// wait overlaps everything up to the sandbox's own cgroup.
	p.setWarmTarget()
	p.Warm()
	if keep {
		return nil
	}
	// The controllers the budget limits, and cpuset, whose CPUs and memory
	// nodes containerd copies down so that a process may join the parent.
	path, hier, _ := v1Controllers(p.dirs, cgroup1.Memory, cgroup1.Cpu, cgroup1.Pids, cgroup1.Cpuset)
	if _, err := cgroup1.New(path, v1Resources(opts.Budget), hier); err != nil {
		return fmt.Errorf("create cgroup %s: %w", p.path, err)
	}
	return nil
}

func (p *Parent) openV2(opts Options) error {
	group := opts.Path
	if group == "" {
		var leaf string
		var err error
		if group, leaf, err = autoV2Parent(); err != nil {
			return err
		}
		if leaf != "" {
			p.warmProcs = filepath.Join(Root, leaf, "cgroup.procs")
		}
	}
	group = cleanGroup(group)
	if group == "/" {
		return errors.New("cgroup parent: refusing the root cgroup")
	}
	p.path = group
	p.dirs = []string{filepath.Join(Root, group)}
	if err := p.lock(opts.LockDir); err != nil {
		return err
	}
	if opts.Keep && p.exists() {
		return nil
	}
	if _, err := cgroup2.NewManager(Root, group, v2Resources(opts.Budget)); err != nil {
		return fmt.Errorf("create cgroup %s: %w", group, err)
	}
	// Children need the controllers enabled in the parent's own
	// subtree_control; NewManager enables them only in its ancestors.
	ctl := filepath.Join(p.dirs[0], "cgroup.subtree_control")
	if err := os.WriteFile(ctl, []byte("+cpu +memory +pids"), 0); err != nil {
		return fmt.Errorf("enable controllers in %s: %w", group, err)
	}
	return nil
}

// autoV2Parent picks the parent on a v2 host: inside a delegated cgroup
// that holds no process but jaild, "<own>/sandboxes" after moving jaild
// itself into the leaf "<own>/daemon"; otherwise "/jaild". A delegated
// cgroup shared with other processes (a shell in a unit, say) cannot enable
// controllers for its children, and jaild does not move processes it did
// not start, except in a container's own cgroup tree (see [v2Self.owned]):
// there it moves every other process into the leaf "/init", as
// docker-in-docker's entrypoint does, since they are all the container's.
// leaf is jaild's own leaf, or empty when it stays where it is.
func autoV2Parent() (group, leaf string, err error) {
	s, err := ownV2Self()
	if err != nil {
		return "", "", err
	}
	self := s.group
	if b := filepath.Base(self); (b == "daemon" || (b == "init" && s.owned)) && s.delegated(filepath.Dir(self)) {
		// Already moved, e.g. jaild restarted in its unit, or a one-shot
		// run started in a container after its daemon made the move.
		return filepath.Join(filepath.Dir(self), "sandboxes"), self, nil
	}
	switch {
	case self == "/" && s.owned:
		if err := emptyInto(Root, filepath.Join(Root, "init")); err != nil {
			return "", "", err
		}
	case self == "/" || !s.delegated(self) || !alone(filepath.Join(Root, self)):
		return "/" + DefaultName, "", nil
	}
	leaf = filepath.Join(self, "daemon")
	if err := os.MkdirAll(filepath.Join(Root, leaf), 0o755); err != nil {
		return "", "", fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	// Writing our pid moves the whole process (all threads) on v2.
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(Root, leaf, "cgroup.procs"), pid, 0); err != nil {
		_ = unix.Rmdir(filepath.Join(Root, leaf))
		return "", "", fmt.Errorf("move jaild into %s: %w", leaf, err)
	}
	return filepath.Join(self, "sandboxes"), leaf, nil
}

// v2Self is where jaild is on a v2 host.
type v2Self struct {
	// group is jaild's cgroup as a path below Root.
	group string
	// owned says that the cgroup tree mounted at Root is a container's
	// own: the mount shows a cgroup that is not the hierarchy's real root
	// (the kernel gives every cgroup but the real root a cgroup.type
	// file), as a private cgroup namespace or a runtime that mounted the
	// container's cgroup does, and it is writable. Every process in such
	// a tree is the container's, so the tree is as good as delegated to
	// it. A host never passes: it mounts the real root at Root.
	owned bool
}

func ownV2Self() (v2Self, error) {
	group, err := ownV2()
	if err != nil {
		return v2Self{}, err
	}
	_, err = os.Stat(filepath.Join(Root, "cgroup.type"))
	owned := err == nil && unix.Access(filepath.Join(Root, "cgroup.procs"), unix.W_OK) == nil
	return v2Self{group: group, owned: owned}, nil
}

// delegated reports whether jaild may manage the subtree of group: the
// root of a container's own tree, or a cgroup systemd delegated.
func (s v2Self) delegated(group string) bool {
	return (group == "/" && s.owned) || delegated(filepath.Join(Root, group))
}

// initCgroupNS is the inode of the host's (initial) cgroup namespace, a
// constant of the kernel (PROC_CGROUP_INIT_INO).
const initCgroupNS = 0xEFFFFFFB

// PrivateNamespace reports whether jaild runs in a cgroup namespace of its
// own (a container's), not the host's.
func PrivateNamespace() bool {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/cgroup", &st); err != nil {
		return false // no cgroup namespaces: the kernel predates them
	}
	return st.Ino != initCgroupNS
}

// emptyInto moves every process of the cgroup dir but jaild into the
// cgroup dir leaf, which it creates, until none is left: a process may
// fork while the list is read. Processes that exit meanwhile are skipped.
func emptyInto(dir, leaf string) error {
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	self := strconv.Itoa(os.Getpid())
	for range 100 {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("list processes of %s: %w", dir, err)
		}
		moved := 0
		for _, pid := range strings.Fields(string(data)) {
			if pid == self {
				continue
			}
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move process %s into %s: %w", pid, leaf, err)
			}
			moved++
		}
		if moved == 0 {
			return nil
		}
	}
	return fmt.Errorf("move processes of %s into %s: they keep forking", dir, leaf)
}

// Settle makes, on a v2 host, the move into the leaf "<own>/daemon" that
// Open with an automatic parent would make, and does nothing elsewhere. A
// daemon whose cgroup parent is built by a process it starts (jaild serve
// and its worker) calls it first: the worker then starts in the leaf and
// finds its placement made, where it would otherwise share the unit's
// cgroup with the daemon and fall back to "/jaild".
func Settle() error {
	if mode, err := Detect(); err != nil || mode != V2 {
		return err
	}
	_, _, err := autoV2Parent()
	return err
}

// alone reports whether the cgroup dir holds no process but this one.
func alone(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	return strings.TrimSpace(string(data)) == strconv.Itoa(os.Getpid())
}

// delegated reports whether systemd delegated the cgroup dir to its unit
// (Delegate=yes sets the trusted.delegate xattr, systemd >= 251).
func delegated(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Getxattr(dir, "trusted.delegate", buf)
	return err == nil && n > 0 && buf[0] == '1'
}

// exists reports whether every directory of the parent exists.
func (p *Parent) exists() bool {
	for _, d := range p.dirs {
		if !isDir(d) {
			return false
		}
	}
	return true
}

// Mode is the cgroup mode the parent lives in.
func (p *Parent) Mode() Mode { return p.mode }

// Path is the parent as libcontainer's configs.Cgroup.Path takes it.
func (p *Parent) Path() string { return p.path }

// Dirs are the parent's absolute directories.
func (p *Parent) Dirs() []string { return p.dirs }

// MemoryUsage is the memory charged to the parent: to every sandbox and
// everything else below it.
func (p *Parent) MemoryUsage() (int64, error) {
	return (&Group{Mode: p.mode, Path: p.path, Dirs: p.dirs}).MemoryUsage()
}

// PidsFree is how many more processes and threads the parent's pids
// budget lets its sandboxes make now; ok is false when the parent has no
// pids limit or it cannot be read.
func (p *Parent) PidsFree() (free int64, ok bool) {
	g := &Group{Mode: p.mode, Path: p.path, Dirs: p.dirs}
	limit, current := filepath.Join(p.dirs[0], "pids.max"), filepath.Join(p.dirs[0], "pids.current")
	if p.mode == V1 {
		limit, current = g.v1File("pids", "pids.max"), g.v1File("pids", "pids.current")
	}
	max, err := readUint(limit) // "max", no limit, does not parse
	if err != nil {
		return 0, false
	}
	cur, err := readUint(current)
	if err != nil {
		return 0, false
	}
	return int64(max) - int64(cur), true
}

// Child names the cgroup of the sandbox id under p.
func (p *Parent) Child(id string) *Group {
	g := &Group{Mode: p.mode, Path: filepath.Join(p.path, id)}
	for _, d := range p.dirs {
		g.Dirs = append(g.Dirs, filepath.Join(d, id))
	}
	return g
}

// Close drops this process's claim on the parent and removes each of its
// directories that no other jaild process holds. rmdir never removes a
// cgroup with children or processes, so a parent still in use survives.
func (p *Parent) Close() error {
	p.warmMu.Lock()
	p.warmDone = true
	p.warmMu.Unlock()
	p.warmers.Wait()
	var errs []error
	for i, f := range p.locks {
		// Give this user's shared lock up before asking for the exclusive
		// one. Upgrading in place would fail for both of two users
		// closing at once (each still holding its shared lock while the
		// other asks), and neither would remove the directory; this way
		// the later of the two finds no other user and removes it.
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			continue // another jaild still uses this directory
		}
		if err := removeFiles(p.dirs[i]); err != nil {
			errs = append(errs, err)
		}
		if err := p.rmdir(p.dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", p.dirs[i], err))
		}
	}
	p.unlock()
	return errors.Join(errs...)
}

// releaseWait bounds how long Release waits for a parent to empty.
const releaseWait = 10 * time.Second

// Release does what Close would have done for a jaild that died: it removes
// each of dirs (a parent's Dirs) that no live jaild holds, under the same
// locks, so that a jaild joining the parent meanwhile waits and then
// creates it again. A parent still busy after releaseWait (sandboxes left
// in it) survives, with an error.
func Release(lockDir string, dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if !strings.HasPrefix(filepath.Clean(d), Root+"/") {
			errs = append(errs, fmt.Errorf("cgroup %s: not under %s", d, Root))
			continue
		}
		f, err := os.OpenFile(lockName(lockDir, d), os.O_RDWR, 0)
		if err != nil {
			continue // never locked: not a parent jaild made
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			// No jaild uses the parent: a busy one holds a sandbox still
			// being torn down (or its killed init, not yet reaped by a
			// slow pid 1). Wait for it a bounded time.
			deadline := time.Now().Add(releaseWait)
			if err := removeFiles(d); err != nil {
				errs = append(errs, err)
			}
			err := unix.Rmdir(d)
			for errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				err = unix.Rmdir(d)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
		f.Close()
	}
	return errors.Join(errs...)
}
