package jail_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// TestWorkspaceRoot: a Manager given a workspace root outside its state
// dir mounts each workspace there, as <root>/<id> (a tmpfs of the
// workspace's size, nosuid and nodev), its sandboxes use it, and Close
// removes it; nothing is mounted in the state dir's workspaces/.
func TestWorkspaceRoot(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	root := env.WithWorkspaceRoot(t)
	cfg := config(env)
	cfg.WorkspaceRoot = root
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	a, b := newWorkspace(t, m, 1<<20), newWorkspace(t, m, 0)
	for _, ws := range []*jail.Workspace{a, b} {
		if want := filepath.Join(root, ws.ID()); ws.Dir() != want {
			t.Errorf("Dir = %s, want %s", ws.Dir(), want)
		}
		mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(ws.Dir()))
		if err != nil || len(mounts) != 1 {
			t.Fatalf("mounts at %s: %v, %v", ws.Dir(), mounts, err)
		}
		mi := mounts[0]
		opts := strings.Split(mi.Options, ",")
		if mi.FSType != "tmpfs" || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
			t.Errorf("workspace mount %+v: want a nosuid, nodev tmpfs", mi)
		}
	}
	res := run(t, m, inWS(a, "echo one > /work/f && echo ok"))
	if res.ExitCode != 0 || res.Stdout != "ok\n" {
		t.Fatalf("write: %+v", res)
	}
	if res := run(t, m, inWS(a, "cat /work/f; ls /work | wc -l")); res.Stdout != "one\n1\n" {
		t.Errorf("read back: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(a.Dir(), "f")); err != nil || string(data) != "one\n" {
		t.Errorf("on the host: %q, %v", data, err)
	}
	if res := run(t, m, inWS(b, "ls /work | wc -l")); res.Stdout != "0\n" {
		t.Errorf("the other workspace holds %q files", res.Stdout)
	}
	// The quota is the kernel's.
	if res := run(t, m, inWS(a, "dd if=/dev/zero of=/work/big bs=64k count=32 2>&1; echo $?")); !strings.Contains(res.Stdout, "No space left") {
		t.Errorf("writing 2 MiB into a 1 MiB workspace: %q", res.Stdout)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "workspaces")); len(ents) > 0 {
		t.Errorf("%d workspaces in the state dir", len(ents))
	}
	dirA := a.Dir()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dirA); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("closed workspace's mount point: %v", err)
	}
	if got := testenv.MountsUnder(root); len(got) != 1 {
		t.Errorf("mounts in the root after one Close: %v, want b's", got)
	}
	// testenv's check at cleanup: nothing left in the root either.
}

// TestWorkspaceRootTrust: New refuses a workspace root that another user
// could change or read, or that would meet the state dir, before it makes
// anything; it makes a missing one, mode 0700. jaild doctor's finding
// (CheckWorkspaceRoot) says the same.
func TestWorkspaceRootTrust(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-trust")
	// The roots are made in a root-owned 0700 dir outside the state dir.
	outside, err := os.MkdirTemp("/run", "jaild-trust-roots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	untrusted := func(err error) bool { return errors.Is(err, box.ErrUntrusted) }
	tests := []struct {
		name string
		// setup makes what the test needs under base and returns the
		// root to give New.
		setup func(t *testing.T, base string) string
		is    func(error) bool // nil: New must accept it
		want  string
		after func(t *testing.T, base string)
	}{
		{
			name:  "world writable",
			setup: func(t *testing.T, base string) string { mkdir(t, base+"/ws", 0o777, 0); return base + "/ws" },
			is:    untrusted, want: "workspace root BASE/ws is writable by group or others (mode 0777): chmod go-w BASE/ws",
		},
		{
			name: "sticky and world writable, as /tmp",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/ws", 0o777|os.ModeSticky, 0)
				return base + "/ws"
			},
			is: untrusted, want: "(mode 1777)",
		},
		{
			name:  "owned by another user",
			setup: func(t *testing.T, base string) string { mkdir(t, base+"/ws", 0o700, nobody); return base + "/ws" },
			is:    untrusted, want: "workspace root BASE/ws is owned by uid 65534, not root",
		},
		{
			name:  "readable by others",
			setup: func(t *testing.T, base string) string { mkdir(t, base+"/ws", 0o755, 0); return base + "/ws" },
			is:    untrusted, want: "workspace root BASE/ws is open to group or others (mode 0755), who could read the sandboxes' files in it: chmod 700 BASE/ws",
		},
		{
			name: "group-writable parent",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/p", 0o775, 0)
				mkdir(t, base+"/p/ws", 0o700, 0)
				return base + "/p/ws"
			},
			is: untrusted, want: "BASE/p is writable by group or others (mode 0775)",
		},
		{
			name: "symlinked component owned by another user",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/real", 0o700, 0)
				if err := os.Symlink(base+"/real", base+"/link"); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(base+"/link", nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return base + "/link/ws"
			},
			is: untrusted, want: "BASE/link is a symlink owned by uid 65534, not root",
			after: func(t *testing.T, base string) {
				if _, err := os.Lstat(base + "/real/ws"); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("New made the root through the link: %v", err)
				}
			},
		},
		{
			name:  "in the state dir",
			setup: func(t *testing.T, base string) string { return env.StateDir + "/netns" },
			is:    box.IsInvalid, want: "must be outside the state dir",
		},
		{
			name:  "holding the state dir",
			setup: func(t *testing.T, base string) string { return filepath.Dir(env.StateDir) },
			is:    box.IsInvalid, want: "must be outside the state dir",
		},
		{
			name:  "the slot dir",
			setup: func(t *testing.T, base string) string { return jail.SlotDir },
			is:    box.IsInvalid, want: "must be outside the state dir",
		},
		{
			name:  "missing: made 0700",
			setup: func(t *testing.T, base string) string { return base + "/new/ws" },
			after: func(t *testing.T, base string) {
				if fi, err := os.Stat(base + "/new/ws"); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("made root: %v, %v", fi, err)
				}
			},
		},
		{
			name: "root's symlink to root's directory",
			setup: func(t *testing.T, base string) string {
				mkdir(t, base+"/real", 0o700, 0)
				if err := os.Symlink("real", base+"/ws"); err != nil {
					t.Fatal(err)
				}
				return base + "/ws"
			},
		},
		{
			name:  "the default, given",
			setup: func(t *testing.T, base string) string { return env.StateDir + "/workspaces" },
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join(outside, strings.Repeat("x", i+1))
			mkdir(t, base, 0o711, 0)
			cfg := config(env)
			cfg.WorkspaceRoot = tt.setup(t, base)
			// jaild doctor's finding agrees, before New makes anything.
			if f := jail.CheckWorkspaceRoot(cfg.WorkspaceRoot, env.StateDir); f.OK != (tt.is == nil) {
				t.Errorf("doctor's finding on it: %+v", f)
			}
			m, err := jail.New(cfg)
			if tt.is != nil {
				if err == nil {
					m.Close()
					t.Fatalf("New accepted %s", cfg.WorkspaceRoot)
				}
				if want := strings.ReplaceAll(tt.want, "BASE", base); !tt.is(err) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("New: %v\nwant one line saying %q", err, want)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				ws, err := m.NewWorkspace(0)
				if err != nil {
					m.Close()
					t.Fatal(err)
				}
				real, _ := filepath.EvalSymlinks(cfg.WorkspaceRoot)
				switch {
				case cfg.WorkspaceRoot == env.StateDir+"/workspaces" && jail.DetachedWorkspaces(m):
					// The default: mounted nowhere.
					if !strings.HasPrefix(ws.Dir(), "/proc/") {
						t.Errorf("workspace at %s, want a detached one", ws.Dir())
					}
				case filepath.Dir(ws.Dir()) != real:
					t.Errorf("workspace at %s, want in %s", ws.Dir(), real)
				}
				if err := ws.Close(); err != nil {
					t.Error(err)
				}
				if err := m.Close(); err != nil {
					t.Error(err)
				}
			}
			if tt.after != nil {
				tt.after(t, base)
			}
		})
	}
}

// TestWorkspaceRootCrashSweep: a jaild SIGKILLed with a workspace in a
// root outside its state dir (a sandbox running on it) is swept by its
// watchdog, or, if the watchdog dies too, by the next start, which finds
// the tmpfs by the record even without being told the root.
func TestWorkspaceRootCrashSweep(t *testing.T) {
	t.Run("watchdog", func(t *testing.T) {
		env, owner := startWorkspaceRootHelper(t)
		_ = owner.Process.Signal(syscall.SIGKILL)
		_ = owner.Wait()
		waitFor(t, 20*time.Second, "the watchdog to sweep and exit", func() bool { return len(testenv.Watchdogs(env.StateDir)) == 0 })
		// testenv's check at cleanup: nothing left in the root either.
	})
	t.Run("next start", func(t *testing.T) {
		env, owner := startWorkspaceRootHelper(t)
		testenv.KillWithWatchdog(t, env, owner)
		if len(testenv.ProcsInCgroup(filepath.Base(env.Parent))) == 0 || len(testenv.MountsUnder(env.WorkspaceRoot)) != 1 {
			t.Fatal("the orphan is already gone; the test would prove nothing")
		}
		m, err := jail.New(config(env)) // no WorkspaceRoot: the record says
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
}

// startWorkspaceRootHelper starts helperWorkspace on a private
// installation with a workspace root outside the state dir, and waits
// until its command runs on the workspace.
func startWorkspaceRootHelper(t *testing.T) (*testenv.Install, *exec.Cmd) {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	root := env.WithWorkspaceRoot(t)
	cmd := testenv.StartHelper(t, env, "helper-workspace")
	if got, ns := testenv.MountsUnder(root), testenv.MountsUnder(env.StateDir); len(got) != 1 || len(ns) != 0 {
		t.Fatalf("want the workspace's tmpfs in the root and nothing in the state dir, got %v and %v", got, ns)
	}
	return env, cmd
}

// BenchmarkWorkspaceRoot: making and closing a workspace in the state
// dir's default root and in a root outside it (checked again before each
// mount, and its tmpfs looked up in mountinfo before the unmount).
func BenchmarkWorkspaceRoot(b *testing.B) {
	requireHost(b)
	env := testenv.New(b, "jaild-test")
	custom := env.WithWorkspaceRoot(b)
	for _, tc := range []struct{ name, root string }{{"default", ""}, {"custom", custom}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := config(env)
			cfg.WorkspaceRoot = tc.root
			m, err := jail.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			for b.Loop() {
				ws, err := m.NewWorkspace(0)
				if err != nil {
					b.Fatal(err)
				}
				if err := ws.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
