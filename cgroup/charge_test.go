package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFilesCharge starts a process in the files cgroup that fills a tmpfs
// file of the test's own, and checks that the parent's memory usage grows
// by about that much, and that Close removes the files cgroup with the
// parent.
func TestFilesCharge(t *testing.T) {
	p := testParent(t)
	g, err := p.Files()
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	for _, d := range g.Dirs {
		if filepath.Base(d) != FilesName || !strings.HasPrefix(d, Root+"/") {
			t.Errorf("files cgroup dir %s", d)
		}
	}
	if again, err := p.Files(); err != nil || len(again.Dirs) != len(g.Dirs) {
		t.Fatalf("Files again: %v, %v", again, err)
	}
	tmp := t.TempDir()
	if err := mountTmpfs(tmp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmount(tmp) })
	before, err := p.MemoryUsage()
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	// The data comes on stdin, after Start: on v1 the process is moved
	// into the cgroup after it started, so only what it writes after
	// Start has returned is sure to be charged there.
	cmd := exec.Command("dd", "of="+filepath.Join(tmp, "f"), "bs=64K", "status=none")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(cmd); err != nil {
		t.Fatalf("Start: %v", err)
	}
	_, werr := in.Write(make([]byte, size))
	in.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		t.Fatalf("dd: %v, %v", err, werr)
	}
	after, err := p.MemoryUsage()
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; grew < size*9/10 {
		t.Errorf("parent's memory usage grew by %d bytes for a %d-byte tmpfs file, want about that", grew, size)
	}
	if _, err := os.Stat(filepath.Join(tmp, "f")); err != nil {
		t.Fatal(err)
	}
}

func mountTmpfs(dir string) error {
	return unix.Mount("jaild-cgtest", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m")
}

func unmount(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }
