package jail

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepWorkspaceRecordedDir: the sweep of a workspace record acts on
// the tmpfs path the record keeps only if it is one a workspace could have
// (absolute, clean, <root>/<id>), and unmounts only a workspace tmpfs
// there; a record that keeps no path falls back to the state dir's.
func TestSweepWorkspaceRecordedDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	base, err := os.MkdirTemp("/run", "jaild-sweepdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	const id = "0b4e6f0e-5a3c-4c1e-9f0e-0d6c1a2b3c4d"
	// mount mounts a tmpfs with source at dir (made), undone at cleanup.
	mount := func(t *testing.T, dir, source string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for unix.Unmount(dir, unix.MNT_DETACH) == nil {
			}
			os.Remove(dir)
		})
	}
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	state := filepath.Join(base, "state", "containers")
	tests := []struct {
		name    string
		setup   func(t *testing.T) (recDir, mounted string)
		wantErr string // "" if the sweep must remove the mount
	}{
		{"custom root", func(t *testing.T) (string, string) {
			d := filepath.Join(base, "root", id)
			mount(t, d, workspaceSource)
			return d, d
		}, ""},
		{"no recorded dir: the state dir's", func(t *testing.T) (string, string) {
			d, _ := workspacePaths(state, id)
			mount(t, d, workspaceSource)
			return "", d
		}, ""},
		{"not a workspace tmpfs", func(t *testing.T) (string, string) {
			d := filepath.Join(base, "other", id)
			mount(t, d, "something-else")
			return d, d
		}, `is a tmpfs mount of "something-else", not a workspace's tmpfs`},
		{"unclean", func(t *testing.T) (string, string) {
			d := filepath.Join(base, "unclean", id)
			mount(t, d, workspaceSource)
			return filepath.Join(base, "unclean", "x") + "/../" + id, d
		}, "not an absolute, clean"},
		{"relative", func(t *testing.T) (string, string) {
			return "root/" + id, ""
		}, "not an absolute, clean"},
		{"not named by the id", func(t *testing.T) (string, string) {
			d := filepath.Join(base, "named", "other")
			mount(t, d, workspaceSource)
			return d, d
		}, "not an absolute, clean"},
		{"the root itself", func(t *testing.T) (string, string) {
			return "/", ""
		}, "not an absolute, clean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recDir, mounted := tt.setup(t)
			err := m.sweepWorkspace(&record{ID: id, StateRoot: state, Workspace: true, Dir: recDir})
			isMount := false
			if mounted != "" {
				isMount, _ = mountedAt(mounted)
			}
			if tt.wantErr == "" {
				if err != nil || isMount {
					t.Fatalf("sweep: %v; still mounted: %v", err, isMount)
				}
				if _, err := os.Lstat(mounted); !os.IsNotExist(err) {
					t.Errorf("mount point left: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("sweep: %v, want an error saying %q", err, tt.wantErr)
			}
			if mounted != "" && !isMount {
				t.Errorf("the sweep unmounted %s, which it refused", mounted)
			}
		})
	}
}

// mountedAt reports whether anything is mounted at dir.
func mountedAt(dir string) (bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true, nil
		}
	}
	return false, nil
}
