package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/jaild/jaild/cgroup"
)

// TestScrub leaves behind what a failed test could (a process in the
// installation's cgroup, a child cgroup, a mount under the state dir) and
// checks that scrub removes all of it.
func TestScrub(t *testing.T) {
	NeedRoot(t, "mounts and cgroups need root")
	dir, err := os.MkdirTemp("/run", "jaild-scrub-")
	if err != nil {
		t.Fatal(err)
	}
	in := &Install{StateDir: dir, Parent: filepath.Base(dir)}
	t.Cleanup(in.scrub) // idempotent: removes what a failure below leaves
	name := in.Parent
	// The installation's cgroup, in the pids hierarchy on v1, with a child.
	base := filepath.Join(cgroup.Root, "pids")
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		base = cgroup.Root
	}
	leaf := filepath.Join(base, name, "leaf")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	go sleep.Wait() // reaped once scrub kills it
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		sleep.Process.Kill()
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "workspaces", "w")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	// A workspace mounted in a workspace root outside the state dir.
	root := in.WithWorkspaceRoot(t)
	wsMnt := filepath.Join(root, "w")
	if err := os.Mkdir(wsMnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", wsMnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if len(ProcsInCgroup(name)) != 1 || len(CgroupsNamed(name)) != 1 || len(MountsUnder(dir)) != 1 || len(MountsUnder(root)) != 1 {
		t.Fatalf("set-up: procs %v cgroups %v mounts %v %v", ProcsInCgroup(name), CgroupsNamed(name), MountsUnder(dir), MountsUnder(root))
	}

	in.scrub()

	if p := ProcsInCgroup(name); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
	if c := CgroupsNamed(name); len(c) > 0 {
		t.Errorf("cgroups left: %v", c)
	}
	if m := MountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if m := MountsUnder(root); len(m) > 0 {
		t.Errorf("mounts left in the workspace root: %v", m)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir left: %v", err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("workspace root left: %v", err)
	}
}
