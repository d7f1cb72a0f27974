package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// ErrNotMounted: the calling process's cgroup is not visible under the
// cgroup file system mounted for its hierarchy.
var ErrNotMounted = errors.New("cgroup: own cgroup not under the mounted part of its hierarchy")

// A cgroup path in /proc/self/cgroup is relative to the root of its
// hierarchy as the reader's cgroup namespace sees it. A mount of that
// hierarchy need not show it from that root: a container runtime that
// mounts cgroupfs for a container without a cgroup namespace (runc on v1,
// and on v2 without a namespace) bind-mounts the container's own cgroup,
// and mountinfo's root field says which cgroup the mount shows. So the
// directory of a cgroup is the mount point plus the cgroup's path below
// that root. Joining the path onto the mount point instead doubles it
// inside such a container ("<ctr>/<ctr>/jaild"): the budget then lands
// in a cgroup no sandbox is in.

// hierarchy is one cgroup hierarchy this process is in, and where it is
// mounted.
type hierarchy struct {
	Key        string // as ownPaths keys it: "memory", "cpu,cpuacct", "systemd", "" for v2
	Mountpoint string
	Root       string // mountinfo's root field: the cgroup the mount shows
	Own        string // this process's cgroup (/proc/self/cgroup)
	Dir        string // Own's directory: Mountpoint + (Own - Root)
}

// cgroupDir is the directory that shows cgroup cg of a hierarchy mounted
// at mountpoint from root (mountinfo's root field). A cgroup outside that
// root (cg not under it, or a root shown as "/.." because it lies above
// the reader's cgroup namespace) has no directory there: ErrNotMounted.
func cgroupDir(mountpoint, root, cg string) (string, error) {
	if !path.IsAbs(root) || !path.IsAbs(cg) || hasDotDot(root) || hasDotDot(cg) {
		return "", fmt.Errorf("%w: cgroup %q, mount root %q at %s", ErrNotMounted, cg, root, mountpoint)
	}
	root, cg = path.Clean(root), path.Clean(cg)
	rel, ok := strings.CutPrefix(cg, root)
	if root == "/" {
		rel, ok = cg, true
	}
	if !ok || (rel != "" && rel[0] != '/') {
		return "", fmt.Errorf("%w: cgroup %s is outside %s, the part of its hierarchy mounted at %s", ErrNotMounted, cg, root, mountpoint)
	}
	return path.Join(mountpoint, rel), nil
}

// hasDotDot reports whether p has a ".." element, which path.Clean would
// drop at the root: the kernel shows a mount root above the reader's
// cgroup namespace as "/..".
func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// hierarchies pairs each line of a /proc/self/cgroup text with the mount of
// its hierarchy under Root in a /proc/self/mountinfo text. A hierarchy
// with no mount under Root is left out (the host does not mount it, or the
// container runtime did not); one whose mount does not show this process's
// cgroup is an error.
func hierarchies(cgroupFile, mountinfoText []byte) ([]hierarchy, error) {
	mounts, err := mountinfo.GetMountsFromReader(bytes.NewReader(mountinfoText), func(i *mountinfo.Info) (skip, stop bool) {
		under := i.Mountpoint == Root || strings.HasPrefix(i.Mountpoint, Root+"/")
		return !under || (i.FSType != "cgroup" && i.FSType != "cgroup2"), false
	})
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []hierarchy
	for _, line := range strings.Split(strings.TrimSpace(string(cgroupFile)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		h := hierarchy{Key: strings.TrimPrefix(parts[1], "name="), Own: parts[2]}
		var m *mountinfo.Info
		for _, mi := range mounts {
			// A later mount on the same mount point hides the earlier.
			if mountShows(mi, parts[0], parts[1]) && (m == nil || mi.Mountpoint == m.Mountpoint) {
				m = mi
			}
		}
		if m == nil {
			continue
		}
		h.Mountpoint, h.Root = m.Mountpoint, m.Root
		if h.Dir, err = cgroupDir(h.Mountpoint, h.Root, h.Own); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// mountShows reports whether mi mounts the hierarchy of the
// /proc/self/cgroup line with id and controller list ctrls: the v2 one
// (id 0, no controllers) or the v1 one whose super options name exactly
// those controllers.
func mountShows(mi *mountinfo.Info, id, ctrls string) bool {
	if id == "0" && ctrls == "" {
		return mi.FSType == "cgroup2"
	}
	if mi.FSType != "cgroup" {
		return false
	}
	opts := strings.Split(mi.VFSOptions, ",")
	for _, c := range strings.Split(ctrls, ",") {
		if !slices.Contains(opts, c) {
			return false
		}
	}
	return true
}

// ownHierarchies is hierarchies for the calling process.
func ownHierarchies() ([]hierarchy, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return hierarchies(cg, mi)
}

// ownV2 is the calling process's cgroup on a v2 host as a path below Root:
// what libcontainer's v2 manager and containerd's cgroup2 take, whatever
// part of the hierarchy the mount at Root shows.
func ownV2() (group string, err error) {
	hs, err := ownHierarchies()
	if err != nil {
		return "", err
	}
	for _, h := range hs {
		if h.Key == "" && h.Mountpoint == Root {
			return cleanGroup(strings.TrimPrefix(h.Dir, Root)), nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 mount at %s", ErrUnavailable, Root)
}
