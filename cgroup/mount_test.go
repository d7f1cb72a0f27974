package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountinfoOf writes mountinfo lines for a cgroup v1 hierarchy per entry of
// v1 ("memory" -> root) and, if v2Root is not empty, a cgroup2 mount at
// v2At, after the tmpfs at Root.
func mountinfoOf(v1 [][2]string, v2At, v2Root string) string {
	var b strings.Builder
	b.WriteString("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n")
	for i, h := range v1 {
		opts := h[0]
		if h[0] == "systemd" {
			opts = "name=systemd"
		}
		fmt.Fprintf(&b, "%d 31 0:%d %s /sys/fs/cgroup/%s rw,nosuid - cgroup cgroup rw,%s\n", 40+i, 40+i, h[1], h[0], opts)
	}
	if v2Root != "" {
		fmt.Fprintf(&b, "60 31 0:60 %s %s rw,nosuid - cgroup2 cgroup2 rw\n", v2Root, v2At)
	}
	return b.String()
}

func TestCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		name, mountpoint, root, cg string
		want                       string // empty: ErrNotMounted
	}{
		{"host", "/sys/fs/cgroup/memory", "/", "/process_api/x", "/sys/fs/cgroup/memory/process_api/x"},
		{"host root cgroup", "/sys/fs/cgroup/pids", "/", "/", "/sys/fs/cgroup/pids"},
		{"container without cgroupns, runtime-mounted", "/sys/fs/cgroup/memory", "/default/t1", "/default/t1", "/sys/fs/cgroup/memory"},
		{"container without cgroupns, moved below its root", "/sys/fs/cgroup/memory", "/default/t1", "/default/t1/daemon", "/sys/fs/cgroup/memory/daemon"},
		{"container without cgroupns, host cgroupfs bound", "/sys/fs/cgroup/memory", "/", "/default/t1", "/sys/fs/cgroup/memory/default/t1"},
		{"container with cgroupns", "/sys/fs/cgroup/memory", "/", "/", "/sys/fs/cgroup/memory"},
		{"v2 host", "/sys/fs/cgroup", "/", "/system.slice/jaild.service", "/sys/fs/cgroup/system.slice/jaild.service"},
		{"v2 container without cgroupns", "/sys/fs/cgroup", "/kubepods/pod1/c1", "/kubepods/pod1/c1", "/sys/fs/cgroup"},
		{"v2 container with cgroupns", "/sys/fs/cgroup", "/", "/", "/sys/fs/cgroup"},
		{"v2 container with cgroupns, after the leaf move", "/sys/fs/cgroup", "/", "/daemon", "/sys/fs/cgroup/daemon"},
		{"cgroup above the mount's root", "/sys/fs/cgroup/memory", "/a/b", "/a", ""},
		{"cgroup beside the mount's root", "/sys/fs/cgroup/memory", "/a/b", "/a/bc", ""},
		{"mount root above the cgroup namespace", "/sys/fs/cgroup", "/../..", "/", ""},
		{"relative cgroup", "/sys/fs/cgroup", "/", "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupDir(tc.mountpoint, tc.root, tc.cg)
			if tc.want == "" {
				if !errors.Is(err, ErrNotMounted) {
					t.Errorf("cgroupDir(%q, %q, %q) = %q, %v; want ErrNotMounted", tc.mountpoint, tc.root, tc.cg, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("cgroupDir(%q, %q, %q) = %q, %v; want %q", tc.mountpoint, tc.root, tc.cg, got, err, tc.want)
			}
		})
	}
}

// TestV1Dirs checks where the parent "jaild" goes in every hierarchy, from
// the two files the kernel gives a process, in the layouts jaild meets.
// On v1 it must be where libcontainer puts the sandboxes' relative path:
// under the own cgroup resolved through the mount root, except the hybrid
// unified hierarchy, where libcontainer puts it at the root.
func TestV1Dirs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cgroup    string
		mountinfo string
		want      []string
	}{{
		name:      "host",
		cgroup:    "9:name=systemd:/\n8:pids:/\n4:memory:/svc/x\n1:cpu:/\n0::/",
		mountinfo: mountinfoOf([][2]string{{"cpu", "/"}, {"memory", "/"}, {"pids", "/"}, {"systemd", "/"}}, "/sys/fs/cgroup/unified", "/"),
		want:      []string{"/sys/fs/cgroup/systemd/jaild", "/sys/fs/cgroup/pids/jaild", "/sys/fs/cgroup/memory/svc/x/jaild", "/sys/fs/cgroup/cpu/jaild", "/sys/fs/cgroup/unified/jaild"},
	}, {
		name:      "container without cgroupns, runtime-mounted",
		cgroup:    "8:pids:/default/t1\n4:memory:/default/t1\n0::/default/t1",
		mountinfo: mountinfoOf([][2]string{{"memory", "/default/t1"}, {"pids", "/default/t1"}}, "", ""),
		want:      []string{"/sys/fs/cgroup/pids/jaild", "/sys/fs/cgroup/memory/jaild"},
	}, {
		name:      "container without cgroupns, host cgroupfs bound",
		cgroup:    "8:pids:/default/t1\n4:memory:/default/t1\n0::/default/t1",
		mountinfo: mountinfoOf([][2]string{{"memory", "/"}, {"pids", "/"}}, "/sys/fs/cgroup/unified", "/"),
		want:      []string{"/sys/fs/cgroup/pids/default/t1/jaild", "/sys/fs/cgroup/memory/default/t1/jaild", "/sys/fs/cgroup/unified/jaild"},
	}, {
		name:      "container with cgroupns",
		cgroup:    "8:pids:/\n4:memory:/\n0::/",
		mountinfo: mountinfoOf([][2]string{{"memory", "/"}, {"pids", "/"}}, "", ""),
		want:      []string{"/sys/fs/cgroup/pids/jaild", "/sys/fs/cgroup/memory/jaild"},
	}, {
		name:   "a later mount on the same point hides the earlier",
		cgroup: "4:memory:/default/t1",
		mountinfo: mountinfoOf([][2]string{{"memory", "/"}}, "", "") +
			"70 31 0:41 /default/t1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
		want: []string{"/sys/fs/cgroup/memory/jaild"},
	}, {
		name:      "a hierarchy mounted elsewhere is not one of jaild's",
		cgroup:    "4:memory:/x\n8:pids:/x",
		mountinfo: "80 1 0:50 / /mnt/memory rw - cgroup cgroup rw,memory\n" + mountinfoOf([][2]string{{"pids", "/"}}, "", ""),
		want:      []string{"/sys/fs/cgroup/pids/x/jaild"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := hierarchies([]byte(tc.cgroup), []byte(tc.mountinfo))
			if err != nil {
				t.Fatal(err)
			}
			if got := v1DirsOf(hs, "jaild"); !slices.Equal(got, tc.want) {
				t.Errorf("dirs\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestHierarchiesOutside: a mount that does not show jaild's own cgroup
// is an error that says so, not a directory somewhere else.
func TestHierarchiesOutside(t *testing.T) {
	_, err := hierarchies([]byte("4:memory:/other"), []byte(mountinfoOf([][2]string{{"memory", "/default/t1"}}, "", "")))
	if !errors.Is(err, ErrNotMounted) || !strings.Contains(err.Error(), "/other") {
		t.Errorf("err = %v, want ErrNotMounted naming /other", err)
	}
}

// TestOwnV2Dir covers the v2 layouts: the group jaild hands libcontainer
// is a path below Root, whatever part of the hierarchy Root shows.
func TestOwnV2Dir(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, root string
		want               string
	}{
		{"v2 host", "0::/system.slice/jaild.service", "/", "/system.slice/jaild.service"},
		{"v2 container without cgroupns", "0::/kubepods/pod1/c1", "/kubepods/pod1/c1", "/"},
		{"v2 container with cgroupns", "0::/", "/", "/"},
		{"v2 container with cgroupns, after the leaf move", "0::/daemon", "/", "/daemon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := hierarchies([]byte(tc.cgroup), []byte(mountinfoOf(nil, Root, tc.root)))
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != 1 {
				t.Fatalf("hierarchies: %+v, want one", hs)
			}
			if got := cleanGroup(strings.TrimPrefix(hs[0].Dir, Root)); got != tc.want {
				t.Errorf("group %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEmptyInto moves two processes out of a cgroup into a leaf, as jaild
// does with a container's processes on v2 (here in the hybrid host's
// unified hierarchy, or in a v2 host's root), and leaves jaild itself.
func TestEmptyInto(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	base := filepath.Join(Root, "unified")
	if mode, _ := Detect(); mode == V2 {
		base = Root
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup2 hierarchy: %v", err)
	}
	dir := filepath.Join(base, "jaild-cgtest-empty-"+strconv.Itoa(os.Getpid()))
	leaf := filepath.Join(dir, "init")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		_ = unix.Rmdir(leaf)
		if err := unix.Rmdir(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	for range 2 {
		p := exec.Command("sleep", "300")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := emptyInto(dir, leaf); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(dir, "cgroup.procs")); got != "" {
		t.Errorf("%s still holds %q", dir, got)
	}
	if got := strings.Fields(readTrim(t, filepath.Join(leaf, "cgroup.procs"))); len(got) != 2 {
		t.Errorf("%s holds %q, want the two sleeps", leaf, got)
	}
}
