package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// DefaultName is the parent's name when none is configured.
const DefaultName = "jaild"

// Parent is the cgroup that holds all of one jaild installation's sandboxes
// and carries their aggregate budget. Several jaild processes (a daemon and
// one-shot runs) share it; a shared flock on LockFile marks each user, and
// the last one to close removes the parent.
type Parent struct {
	mode Mode
	// path is the parent as libcontainer's configs.Cgroup.Path takes it:
	// relative on v1 (nested under jaild's own cgroups), absolute on v2.
	path string
	dirs []string // absolute directories of the parent
	lock *os.File
}

// Options configure [Open].
type Options struct {
	// Path overrides the parent's placement: a path relative to jaild's
	// own cgroup on v1, an absolute cgroup path on v2. Empty means
	// automatic (see the package doc), with DefaultName.
	Path string
	// LockFile is the file whose shared flock marks a user of the parent.
	// Required.
	LockFile string
	// Budget is applied to the parent on every Open.
	Budget Budget
}

// Open creates (or joins) the parent cgroup and applies the budget.
func Open(opts Options) (_ *Parent, retErr error) {
	mode, err := Detect()
	if err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(opts.LockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open cgroup lock: %w", err)
	}
	defer func() {
		if retErr != nil {
			lock.Close()
		}
	}()
	// Shared: any number of users; the last one upgrades to exclusive in
	// Close before removing the parent, and waits out a remover here.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("lock %s: %w", opts.LockFile, err)
	}
	p := &Parent{mode: mode, lock: lock}
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
	if _, err := cgroup1.New(cgroup1.NestedPath(p.path), v1Resources(opts.Budget)); err != nil {
		return fmt.Errorf("create cgroup %s: %w", p.path, err)
	}
	return nil
}

func (p *Parent) openV2(opts Options) error {
	group := opts.Path
	if group == "" {
		var err error
		if group, err = autoV2Parent(); err != nil {
			return err
		}
	}
	group = cleanGroup(group)
	if group == "/" {
		return errors.New("cgroup parent: refusing the root cgroup")
	}
	p.path = group
	p.dirs = []string{filepath.Join(Root, group)}
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

// autoV2Parent picks the parent on a v2 host: inside a delegated cgroup,
// "<own>/sandboxes" after moving jaild itself into "<own>/daemon";
// otherwise "/jaild".
func autoV2Parent() (string, error) {
	own, err := ownPaths()
	if err != nil {
		return "", err
	}
	self := own[""]
	base := self
	if filepath.Base(self) == "daemon" {
		base = filepath.Dir(self) // already moved (e.g. jaild restarted inside its unit)
	}
	if base == "/" || !delegated(filepath.Join(Root, base)) {
		return "/" + DefaultName, nil
	}
	if base == self {
		leaf := filepath.Join(base, "daemon")
		if err := os.MkdirAll(filepath.Join(Root, leaf), 0o755); err != nil {
			return "", fmt.Errorf("create cgroup %s: %w", leaf, err)
		}
		// Writing our pid moves the whole process (all threads) on v2.
		pid := []byte(strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(filepath.Join(Root, leaf, "cgroup.procs"), pid, 0); err != nil {
			return "", fmt.Errorf("move jaild into %s: %w", leaf, err)
		}
	}
	return filepath.Join(base, "sandboxes"), nil
}

// delegated reports whether systemd delegated the cgroup dir to its unit
// (Delegate=yes sets the trusted.delegate xattr, systemd >= 251).
func delegated(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Getxattr(dir, "trusted.delegate", buf)
	return err == nil && n > 0 && buf[0] == '1'
}

// Mode is the cgroup mode the parent lives in.
func (p *Parent) Mode() Mode { return p.mode }

// Path is the parent as libcontainer's configs.Cgroup.Path takes it.
func (p *Parent) Path() string { return p.path }

// Dirs are the parent's absolute directories.
func (p *Parent) Dirs() []string { return p.dirs }

// Child names the cgroup of the sandbox id under p.
func (p *Parent) Child(id string) *Group {
	g := &Group{Mode: p.mode, Path: filepath.Join(p.path, id)}
	for _, d := range p.dirs {
		g.Dirs = append(g.Dirs, filepath.Join(d, id))
	}
	return g
}

// Close drops this process's claim on the parent and, if no other jaild
// process holds one, removes the parent. rmdir never removes a cgroup with
// children or processes, so a parent still in use survives a race.
func (p *Parent) Close() error {
	if p.lock == nil {
		return nil
	}
	defer func() { p.lock.Close(); p.lock = nil }()
	if err := unix.Flock(int(p.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // another jaild still uses the parent
	}
	var errs []error
	for _, d := range p.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
