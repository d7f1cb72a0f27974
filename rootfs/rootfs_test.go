package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testUser = User{Name: "sandbox", UID: 1000, GID: 1000}

func TestHostLayoutWorkDir(t *testing.T) {
	for _, tc := range []struct {
		name, workDir string
		dirs          []string // entries the layout must have as directories
		noWork        bool     // no entry "work"
		bad           bool
	}{
		{name: "default", workDir: "/work", dirs: []string{"work"}},
		{name: "workspace", workDir: "/workspace", dirs: []string{"workspace"}, noWork: true},
		{name: "nested", workDir: "/home/sandbox", dirs: []string{"home", "home/sandbox"}, noWork: true},
		{name: "usr", workDir: "/usr/src", bad: true},
		{name: "etc", workDir: "/etc", bad: true},
		{name: "proc", workDir: "/proc", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, _, err := hostLayout(testUser, tc.workDir)
			if tc.bad {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("hostLayout(%s) = %v, want ErrInvalid", tc.workDir, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			byPath := map[string]entry{}
			for _, e := range es {
				byPath[e.path] = e
			}
			for _, d := range tc.dirs {
				if e, ok := byPath[d]; !ok || e.link != "" || e.data != "" || e.isFile || e.mode != 0o755 {
					t.Errorf("no directory %s in the layout (%+v)", d, e)
				}
			}
			if _, ok := byPath["work"]; tc.noWork && ok {
				t.Errorf("the layout of %s has /work", tc.workDir)
			}
			want := "sandbox:x:1000:1000:sandbox:" + tc.workDir + ":/bin/sh\n"
			if pw := byPath["etc/passwd"].data; !strings.Contains(pw, want) {
				t.Errorf("passwd = %q, want a line %q", pw, want)
			}
		})
	}
}

// The template is content-addressed: each working directory has its own,
// and the layout it was made with is the one it is checked against.
func TestHostTemplatePerWorkDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the template must be root's")
	}
	state := traversableDir(t)
	a, err := Host(state, testUser, "/work")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Host(state, testUser, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir == b.Dir {
		t.Fatalf("one template %s for /work and /workspace", a.Dir)
	}
	if _, err := os.Lstat(filepath.Join(b.Dir, "work")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/workspace's template has /work: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(b.Dir, "workspace")); err != nil || !fi.IsDir() {
		t.Errorf("/workspace's template has no directory /workspace: %v", err)
	}
	if again, err := Host(state, testUser, "/workspace"); err != nil || again.Dir != b.Dir {
		t.Errorf("second Host(/workspace) = %v, %v; want %s", again, err, b.Dir)
	}
	ms := b.Mounts(4096, testUser, "", "")
	if got := ms[len(ms)-len(b.binds)-1].Destination; got != "/workspace" {
		t.Errorf("the tmpfs is mounted at %s, want /workspace", got)
	}
}

func TestOpenNeedsWorkDir(t *testing.T) {
	dir := traversableDir(t)
	for _, d := range []string{"proc", "dev", "tmp", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(dir, "/work"); err != nil {
		t.Fatalf("Open with /work: %v", err)
	}
	_, err := Open(dir, "/workspace")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "/workspace") {
		t.Fatalf("Open without /workspace = %v, want ErrInvalid naming /workspace", err)
	}
	// A symlink on the way would be followed by the mount.
	if err := os.Symlink("work", filepath.Join(dir, "workspace")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "/workspace"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open through a symlink = %v, want ErrInvalid", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "home", "sb"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r, err := Open(dir, "/home/sb"); err != nil || r.WorkDir != "/home/sb" {
		t.Fatalf("Open with /home/sb = %v, %v", r, err)
	}
}

// traversableDir is a temporary directory whose ancestors all have o+x, as
// checkTraversable wants.
func traversableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if !strings.HasPrefix(d, os.TempDir()) || d == os.TempDir() {
				t.Skipf("%s is not searchable by others", d)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
