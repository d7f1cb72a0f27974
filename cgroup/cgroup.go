package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Root is where cgroup file systems are mounted.
const Root = "/sys/fs/cgroup"

// ErrUnavailable: no usable cgroup hierarchy is mounted.
var ErrUnavailable = errors.New("cgroup: no cgroup hierarchy mounted")

// Mode is the cgroup version jaild drives.
type Mode int

const (
	V1 Mode = 1 // legacy or hybrid: controllers in v1 hierarchies
	V2 Mode = 2 // unified
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "unknown"
}

// Detect reports the host's cgroup mode. Hybrid hosts count as V1: their
// controllers live in v1 hierarchies and the unified one is empty.
func Detect() (Mode, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return V2, nil
	case cgroups.Legacy, cgroups.Hybrid:
		return V1, nil
	}
	return 0, ErrUnavailable
}

// Budget is the aggregate limit for all sandboxes under one parent. A zero
// field means no aggregate limit for that resource.
type Budget struct {
	Memory int64   // bytes
	Pids   int64   // processes and threads
	CPUs   float64 // cores
}

// Group names one sandbox cgroup in a form that stays valid after the jaild
// that made it has died: Dirs are absolute, so a sweeper in another cgroup
// finds them. Path is what libcontainer's configs.Cgroup.Path takes.
type Group struct {
	Mode Mode     `json:"mode"`
	Path string   `json:"path"`
	Dirs []string `json:"dirs"`
}

// ownPaths maps each v1 hierarchy (by its mount dir name: "memory",
// "cpu,cpuacct", "systemd") to the calling process's cgroup in it, and "" to
// its v2 path.
func ownPaths() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrl := strings.TrimPrefix(parts[1], "name=")
		out[ctrl] = parts[2]
	}
	return out, nil
}

// v1Dirs lists, for every mounted v1 hierarchy, the absolute directory of
// rel nested under the calling process's own cgroup in that hierarchy: the
// same place libcontainer's v1 manager puts a relative path (it too
// resolves the own cgroup through mountinfo's root, see mount.go). The
// unified hierarchy of a hybrid host is the exception, as in libcontainer:
// it has no controllers, and libcontainer puts a relative path at its root.
func v1Dirs(rel string) ([]string, error) {
	hs, err := ownHierarchies()
	if err != nil {
		return nil, err
	}
	return v1DirsOf(hs, rel), nil
}

func v1DirsOf(hs []hierarchy, rel string) []string {
	var dirs []string
	for _, h := range hs {
		if h.Key == "" {
			// libcontainer still makes the cgroup there, so it has
			// to be removed there too.
			dirs = append(dirs, filepath.Join(h.Mountpoint, rel))
			continue
		}
		dirs = append(dirs, filepath.Join(h.Dir, rel))
	}
	return dirs
}

// isDir reports whether d is an existing directory.
func isDir(d string) bool {
	fi, err := os.Stat(d)
	return err == nil && fi.IsDir()
}

// Remove kills every process left in g and removes its directories. It is
// for sandboxes whose owner died; a live sandbox is torn down by
// libcontainer. Missing directories are not an error.
func (g *Group) Remove() error {
	if g.Mode == V2 {
		group := strings.TrimPrefix(g.Dirs[0], Root)
		if !isDir(g.Dirs[0]) {
			return nil
		}
		m, err := cgroup2.Load(group)
		if err != nil {
			return err
		}
		if err := m.Kill(); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", group, err)
		}
		return rmdirWait(g.Dirs[0])
	}
	// v1 has no cgroup.kill: freeze, kill every member, thaw, so a fork
	// bomb cannot outrun the kill loop.
	var freezer string
	for _, d := range g.Dirs {
		if strings.HasPrefix(d, filepath.Join(Root, "freezer")+"/") && isDir(d) {
			freezer = d
		}
	}
	if freezer != "" {
		_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("FROZEN"), 0)
	}
	for _, d := range g.Dirs {
		killProcs(d)
	}
	if freezer != "" {
		_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0)
	}
	var errs []error
	for _, d := range g.Dirs {
		if err := rmdirWait(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killProcs sends SIGKILL to every process in the cgroup dir d and its
// descendants.
func killProcs(d string) {
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return nil
	})
}

// rmdirWait removes the cgroup dir d and its child cgroups, retrying while
// killed processes are still exiting (a throttled cgroup takes tens of ms).
func rmdirWait(d string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := rmdirTree(d)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
		killProcs(d)
		time.Sleep(10 * time.Millisecond)
	}
}

// rmdirTree removes d after its sub-directories, deepest first. A cgroup
// directory holds only kernel files, which rmdir does not need removed.
func rmdirTree(d string) error {
	entries, err := os.ReadDir(d)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(d, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return unix.Rmdir(d)
}

// v1Controllers hands containerd the v1 cgroup whose directories are dirs
// (one per hierarchy, as v1Dirs gives them), restricted to the named
// controllers that have a hierarchy here. Given both the paths and the
// hierarchy, containerd skips its own lookups: by default it resolves every
// controller through /proc/self/cgroup and reads /proc/self/mountinfo once
// per controller. rel maps each controller to its path below its
// hierarchy's root.
func v1Controllers(dirs []string, names ...cgroup1.Name) (path cgroup1.Path, hier cgroup1.InitOpts, rel map[cgroup1.Name]string) {
	rel = make(map[cgroup1.Name]string)
	for _, d := range dirs {
		ctrls, p, _ := strings.Cut(strings.TrimPrefix(d, Root+"/"), "/")
		for _, c := range strings.Split(ctrls, ",") {
			rel[cgroup1.Name(c)] = "/" + p
		}
	}
	var subs []cgroup1.Subsystem
	for _, n := range names {
		if _, ok := rel[n]; !ok {
			continue
		}
		switch n {
		case cgroup1.Memory:
			// Usage readings need the memory counters themselves, not
			// the 12 files of swap, kernel and TCP buffer counters.
			subs = append(subs, cgroup1.NewMemory(Root, cgroup1.IgnoreModules("memsw", "kmem", "kmem.tcp")))
		case cgroup1.Cpu:
			subs = append(subs, cgroup1.NewCpu(Root))
		case cgroup1.Pids:
			subs = append(subs, cgroup1.NewPids(Root))
		case cgroup1.Cpuset:
			subs = append(subs, cgroup1.NewCpuset(Root))
		default:
			panic("cgroup: v1Controllers: unsupported controller " + string(n))
		}
	}
	path = func(n cgroup1.Name) (string, error) {
		if p, ok := rel[n]; ok {
			return p, nil
		}
		return "", fmt.Errorf("no %s hierarchy", n)
	}
	hier = cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil })
	return path, hier, rel
}

// v1Resources converts a Budget for containerd's v1 controllers.
func v1Resources(b Budget) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if b.Memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &b.Memory}
	}
	if b.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &b.Pids}
	}
	if b.CPUs > 0 {
		q, p := CPUQuota(b.CPUs)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	return r
}

// CPUQuota converts cores into a CFS quota over a 100 ms period, for the
// parent's budget and (through libcontainer) each sandbox's limit alike.
func CPUQuota(cpus float64) (quota int64, period uint64) {
	const p = 100000
	return int64(cpus * p), p
}

func v2Resources(b Budget) *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if b.Memory > 0 {
		r.Memory = &cgroup2.Memory{Max: &b.Memory}
	}
	if b.Pids > 0 {
		r.Pids = &cgroup2.Pids{Max: b.Pids}
	}
	if b.CPUs > 0 {
		q, p := CPUQuota(b.CPUs)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&q, &p)}
	}
	return r
}

func cleanGroup(p string) string { return path.Clean("/" + p) }

// MissingControllers lists which of want the host cannot give sandboxes.
func MissingControllers(mode Mode, want ...string) []string {
	var missing []string
	if mode == V2 {
		data, _ := os.ReadFile(filepath.Join(Root, "cgroup.controllers"))
		have := strings.Fields(string(data))
		for _, w := range want {
			found := false
			for _, h := range have {
				found = found || h == w
			}
			if !found {
				missing = append(missing, w)
			}
		}
		return missing
	}
	own, _ := ownPaths()
	for _, w := range want {
		found := false
		for ctrl := range own {
			for _, c := range strings.Split(ctrl, ",") {
				found = found || c == w
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}

// DescribeV2Placement says where sandboxes would go on a v2 host, without
// moving anything.
func DescribeV2Placement() string {
	s, err := ownV2Self()
	if err != nil {
		return err.Error()
	}
	self := s.group
	if b := filepath.Base(self); (b == "daemon" || (b == "init" && s.owned)) && s.delegated(filepath.Dir(self)) {
		return fmt.Sprintf("jaild runs in %s; sandboxes go to %s", self, filepath.Join(filepath.Dir(self), "sandboxes"))
	}
	if self == "/" && s.owned {
		return "the container's own cgroup tree (mounted from jaild's cgroup, writable): jaild moves its other processes into /init and itself into /daemon, sandboxes go to /sandboxes"
	}
	if self != "/" && s.delegated(self) {
		if alone(filepath.Join(Root, self)) {
			return fmt.Sprintf("delegated cgroup %s: jaild moves into %s/daemon, sandboxes go to %s/sandboxes", self, self, self)
		}
		return fmt.Sprintf("delegated cgroup %s holds other processes; sandboxes go to /%s", self, DefaultName)
	}
	return fmt.Sprintf("cgroup %s is not delegated (systemd Delegate=yes, or a container's private cgroup namespace); sandboxes go to /%s", self, DefaultName)
}
