package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// FilesName is the child of the parent that holds the short-lived
// processes that write workspace files on a daemon's behalf (see
// [Parent.Files]). It is never a sandbox's id: those are UUIDs.
const FilesName = "files"

// filesHierarchies are the v1 hierarchies the files cgroup is made in:
// memory, whose charges are the point, and pids, so that the writers count
// against the parent's pids budget. Other hierarchies need more set-up
// before a process may join (cpuset's cpus and mems) and account for
// nothing that matters here; there the writer stays in the daemon's cgroup.
var filesHierarchies = []string{"memory", "pids"}

// Files returns the child cgroup of p that a daemon starts its workspace
// writers in, creating it if missing. tmpfs pages are charged to the
// memory cgroup of the process that writes them, and stay charged there
// after it exits; written from the daemon, a session's files would escape
// the sandboxes' aggregate budget. Written from a process in this cgroup,
// they count against the parent's memory limit like the pages the
// sandboxes write. The last user of the parent removes it ([Parent.Close],
// [Release]); a removed memory cgroup keeps its charges, counted in the
// parent, until the pages are freed.
func (p *Parent) Files() (*Group, error) {
	g := &Group{Mode: p.mode, Path: filepath.Join(p.path, FilesName)}
	for _, d := range p.dirs {
		if p.mode == V1 && !inHierarchies(d, filesHierarchies) {
			continue
		}
		dir := filepath.Join(d, FilesName)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		g.Dirs = append(g.Dirs, dir)
	}
	if len(g.Dirs) == 0 {
		return nil, fmt.Errorf("cgroup %s: no memory hierarchy", g.Path)
	}
	return g, nil
}

// inHierarchies reports whether the v1 directory d is in a hierarchy that
// holds one of the controllers names.
func inHierarchies(d string, names []string) bool {
	rel, err := filepath.Rel(Root, d)
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(rel, "/")
	for _, c := range strings.Split(first, ",") {
		for _, n := range names {
			if c == n {
				return true
			}
		}
	}
	return false
}

// removeFiles removes the files cgroup under the parent directory d, if
// there is one. rmdir never removes a cgroup that holds a process.
func removeFiles(d string) error {
	err := unix.Rmdir(filepath.Join(d, FilesName))
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", filepath.Join(d, FilesName), err)
	}
	return nil
}

// Start starts cmd in g. On v2 the kernel forks it straight into g
// (CLONE_INTO_CGROUP). On v1 it starts in its parent's cgroups and is moved
// into g's before Start returns, so a caller that gives it work only after
// Start has returned has every page that work allocates charged to g. If
// the move fails, the process is killed and reaped, and Start fails.
func (g *Group) Start(cmd *exec.Cmd) error {
	if g.Mode == V2 {
		fd, err := unix.Open(g.Dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", g.Path, err)
		}
		defer unix.Close(fd)
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := []byte(strconv.Itoa(cmd.Process.Pid))
	for _, d := range g.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("move process into cgroup %s: %w", d, err)
		}
	}
	return nil
}

// MemoryUsage is the memory charged to g and its descendants, in bytes.
func (g *Group) MemoryUsage() (int64, error) {
	f := filepath.Join(g.Dirs[0], "memory.current")
	if g.Mode == V1 {
		f = g.v1File("memory", "memory.usage_in_bytes")
	}
	n, err := readUint(f)
	if err != nil {
		return 0, fmt.Errorf("read cgroup %s: %w", g.Path, err)
	}
	return int64(n), nil
}
