package jail_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// nobody is the other user of these tests: the owner of what a user who is
// not root could have made.
const nobody = 65534

// trustBase returns a directory for one test's state dirs, inside a private
// installation that checks for leftovers. It is searchable by everyone, so
// that no refusal below is down to the directory that holds the state
// dirs: each is down to the trust checks alone.
func trustBase(t *testing.T) *testenv.Install {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-trust")
	if err := os.Chmod(env.StateDir, 0o711); err != nil {
		t.Fatal(err)
	}
	return env
}

// mkdir makes dir with exactly mode, owned by uid.
func mkdir(t *testing.T, dir string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// wantRefused asserts that jail.New refuses cfg with an error that matches
// sentinel and says want; a Manager it built anyway is closed.
func wantRefused(t *testing.T, cfg jail.Config, sentinel error, want string) {
	t.Helper()
	m, err := jail.New(cfg)
	if err == nil {
		m.Close()
		t.Fatalf("New accepted it; want an error saying %q", want)
	}
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want) {
		t.Fatalf("New: %v\nwant %v saying %q", err, sentinel, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the error is not one line: %q", err)
	}
}

// TestStateDirTrust checks that New uses a state dir only if no user but
// root can change what its path names.
func TestStateDirTrust(t *testing.T) {
	env := trustBase(t)
	tests := []struct {
		name string
		// setup makes what the test needs under base and returns the
		// state dir to give New.
		setup func(t *testing.T, base string) string
		want  string // "" if New must accept it
		// after, if set, checks base once New has refused.
		after func(t *testing.T, base string)
	}{
		{
			name: "owned by another user",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/state", 0o711, nobody)
				return base + "/state"
			},
			want: "state dir BASE/state is owned by uid 65534, not root: chown root BASE/state",
		},
		{
			name: "group writable",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/state", 0o771, 0)
				return base + "/state"
			},
			want: "state dir BASE/state is writable by group or others (mode 0771): chmod go-w BASE/state",
		},
		{
			// The sticky bit protects entries, not the directory: others
			// could still add a template of their own.
			name: "sticky and world writable",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/state", 0o777|os.ModeSticky, 0)
				return base + "/state"
			},
			want: "(mode 1777): chmod go-w BASE/state",
		},
		{
			name: "group-writable parent",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/p", 0o775, 0)
				mkdir(t, base+"/p/state", 0o711, 0)
				return base + "/p/state"
			},
			want: "state dir BASE/p/state: BASE/p is writable by group or others (mode 0775): chmod go-w BASE/p, or use a state dir outside BASE/p",
		},
		{
			name: "parent owned by another user",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/p", 0o755, nobody)
				mkdir(t, base+"/p/state", 0o711, 0)
				return base + "/p/state"
			},
			want: "BASE/p is owned by uid 65534, not root: chown root BASE/p",
		},
		{
			// In a sticky dir others may make a link where root's
			// state dir was to be.
			name: "symlink owned by another user",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/sticky", 0o777|os.ModeSticky, 0)
				mkdir(t, base+"/real", 0o711, 0)
				link := base + "/sticky/state"
				if err := os.Symlink(base+"/real", link); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(link, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return link
			},
			want: "BASE/sticky/state is a symlink owned by uid 65534, not root",
		},
		{
			// Refused before anything is made through the link.
			name: "symlink owned by another user to where the state dir would be made",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/sticky", 0o777|os.ModeSticky, 0)
				mkdir(t, base+"/target", 0o711, 0)
				link := base + "/sticky/s"
				if err := os.Symlink(base+"/target", link); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(link, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return link + "/state"
			},
			want: "BASE/sticky/s is a symlink owned by uid 65534, not root",
			after: func(t *testing.T, base string) {
				if _, err := os.Lstat(base + "/target/state"); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("New made %s/target/state through the link: %v", base, err)
				}
			},
		},
		{
			name: "symlink to a directory of another user",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/theirs", 0o711, nobody)
				if err := os.Symlink("theirs", base+"/state"); err != nil {
					t.Fatal(err)
				}
				return base + "/state"
			},
			want: "state dir BASE/state: BASE/theirs is owned by uid 65534, not root: chown root BASE/theirs",
		},
		{
			name: "symlink through a group-writable directory",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/open", 0o775, 0)
				mkdir(t, base+"/open/real", 0o711, 0)
				if err := os.Symlink(base+"/open/real", base+"/state"); err != nil {
					t.Fatal(err)
				}
				return base + "/state"
			},
			want: "BASE/open is writable by group or others (mode 0775)",
		},
		{
			// Accepted: a root-owned sticky parent, as /tmp.
			name: "in a sticky root-owned directory",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/sticky", 0o777|os.ModeSticky, 0)
				return base + "/sticky/state" // made by New
			},
		},
		{
			name: "root's symlink to root's directory",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/real", 0o700, 0)
				if err := os.Symlink("real", base+"/state"); err != nil {
					t.Fatal(err)
				}
				return base + "/state"
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(env.StateDir, strings.Repeat("x", i+1))
			mkdir(t, base, 0o711, 0)
			cfg := jail.Config{StateDir: tt.setup(t, base), CgroupParent: env.Parent}
			if tt.want != "" {
				wantRefused(t, cfg, box.ErrUntrusted, strings.ReplaceAll(tt.want, "BASE", base))
				if tt.after != nil {
					tt.after(t, base)
				}
				if f := jail.CheckStateDir(cfg.StateDir); f.OK || !strings.Contains(f.Detail, "chmod") && !strings.Contains(f.Detail, "chown") {
					t.Errorf("doctor's finding on it: %+v", f)
				}
				return
			}
			if f := jail.CheckStateDir(cfg.StateDir); !f.OK {
				t.Errorf("doctor's finding on it: %+v", f)
			}
			m, err := jail.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Error(err)
			}
			// The template is in the real directory.
			real, err := filepath.EvalSymlinks(cfg.StateDir)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := filepath.Glob(real + "/rootfs-*"); len(got) != 1 {
				t.Errorf("templates in %s: %v", real, got)
			}
		})
	}
}

// TestTemplateTrust checks that New refuses a rootfs template that is no
// longer as jaild generated it, and uses it again once it is removed.
func TestTemplateTrust(t *testing.T) {
	env := trustBase(t)
	cfg := config(env)
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string
	}{
		{"writable by others", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, ". has mode 0777, not 0755"},
		{"etc owned by another user", func(t *testing.T, dir string) {
			if err := os.Chown(dir+"/etc", nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, "etc is owned by uid 65534, not root"},
		{"passwd replaced", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir+"/etc/passwd", []byte("root::0:0::/:/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "etc/passwd has other content"},
		{"passwd writable by others", func(t *testing.T, dir string) {
			if err := os.Chmod(dir+"/etc/passwd", 0o666); err != nil {
				t.Fatal(err)
			}
		}, "etc/passwd has mode 0666, not 0644"},
		{"a library preloaded", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir+"/etc/ld.so.preload", []byte("/work/evil.so\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "etc has an entry ld.so.preload that jaild did not make"},
		{"a directory added", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir+"/opt", 0o755); err != nil {
				t.Fatal(err)
			}
		}, ". has an entry opt that jaild did not make"},
		{"replaced by another user's copy", func(t *testing.T, dir string) {
			if out, err := exec.Command("chown", "-hR", "65534:65534", dir).CombinedOutput(); err != nil {
				t.Fatalf("chown: %v %s", err, out)
			}
		}, ". is owned by uid 65534, not root"},
		{"replaced by a symlink", func(t *testing.T, dir string) {
			if err := os.Rename(dir, dir+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Base(dir)+".moved", dir); err != nil {
				t.Fatal(err)
			}
		}, ". is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			templates := func() []string {
				got, _ := filepath.Glob(env.StateDir + "/rootfs-*")
				return got
			}
			for _, d := range templates() {
				os.RemoveAll(d)
			}
			m, err := jail.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			dirs := templates()
			if len(dirs) != 1 {
				t.Fatalf("templates: %v", dirs)
			}
			tt.change(t, dirs[0])
			wantRefused(t, cfg, box.ErrRootfs, "template "+dirs[0]+" is not as jaild generated it: "+tt.want+"; remove it (rm -rf "+dirs[0]+")")
			// The fix the error names works.
			for _, d := range templates() {
				if err := os.RemoveAll(d); err != nil {
					t.Fatal(err)
				}
			}
			m, err = jail.New(cfg)
			if err != nil {
				t.Fatalf("New after removing the template: %v", err)
			}
			if err := m.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPreparedRootfsTrust checks that a prepared root (--rootfs DIR) is
// refused if another user could replace it; what is in it is the
// operator's choice and is not checked.
func TestPreparedRootfsTrust(t *testing.T) {
	env := trustBase(t)
	tests := []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"writable by others", 0o777, 0, "rootfs ROOT is writable by group or others (mode 0777): chmod go-w ROOT"},
		{"owned by another user", 0o755, nobody, "rootfs ROOT is owned by uid 65534, not root: chown root ROOT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not under the state dir: /run is noexec on systemd hosts.
			tmp, err := os.MkdirTemp("", "jaild-rootfs-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(tmp) })
			if err := os.Chmod(tmp, 0o711); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(tmp, "root")
			mkdir(t, root, 0o755, 0)
			for _, d := range []string{"bin", "proc", "dev", "tmp", "work"} {
				mkdir(t, filepath.Join(root, d), 0o755, 0)
			}
			cfg := config(env)
			cfg.Rootfs = root
			// Accepted as it is.
			m, err := jail.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(root, tt.uid, tt.uid); err != nil {
				t.Fatal(err)
			}
			want := strings.ReplaceAll(tt.want, "ROOT", root)
			wantRefused(t, cfg, box.ErrRootfs, want)
			wantRefused(t, cfg, box.ErrUntrusted, want)
		})
	}
}
