package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Workspaces are mounted under a workspace root: <state dir>/workspaces by
// default, or the directory of [Config.WorkspaceRoot]. Root mounts a tmpfs
// at <root>/<id> for each workspace and a crash sweep, run by any later
// jaild as root, unmounts and removes it, so the root is trusted as the
// state dir is (see trust.go): it and every parent are root's and
// writable by no one else. A root of the operator's must also be closed to
// others (no group or other bits): the tmpfs in it holds the sandboxes'
// files, readable by anyone who can reach them. jaild never changes the
// mode of a directory it did not make, since the operator may have given
// one that other things live in.
//
// The slot record of a workspace keeps the path of its tmpfs (record.Dir),
// so that the sweep that follows a crash finds it wherever the root was.
// A record is as trusted as the state root it names (only root can write
// the slot dir); the sweep still uses only an absolute, clean path ending
// in the record's id, and unmounts only the workspace tmpfs jaild mounts
// there (see workspaceMount).

// workspaceSource is the source name of every workspace tmpfs, which the
// sweep checks before it unmounts what a record names.
const workspaceSource = "jaild-workspace"

// openWorkspaceRoot checks the workspace root of a Manager on stateDir
// (real path) and slotDir, making it if it is missing, and returns its
// real path and whether it is the default. The default,
// <stateDir>/workspaces, is jaild's own and made by NewWorkspace.
func openWorkspaceRoot(root, stateDir, slotDir string) (string, bool, error) {
	real, def, err := vetWorkspaceRoot(root, stateDir, slotDir)
	if err != nil || def {
		return real, def, err
	}
	if _, err := os.Lstat(real); errors.Is(err, os.ErrNotExist) {
		if real, err = makeTrustedDir("workspace root", real, 0o700); err != nil {
			return "", false, err
		}
	}
	if err := checkWorkspaceRoot(root, real); err != nil {
		return "", false, err
	}
	return real, false, nil
}

// vetWorkspaceRoot is what openWorkspaceRoot checks before it makes
// anything: whether root is the default, and otherwise whether it is
// outside the state and slot dirs and safe from other users as far as it
// exists. It returns root's real path (the tail that does not exist yet
// unresolved).
func vetWorkspaceRoot(root, stateDir, slotDir string) (string, bool, error) {
	const what = "workspace root"
	def := filepath.Join(stateDir, "workspaces")
	if root == "" {
		return def, true, nil
	}
	real, err := trustedDir(what, root, true)
	if err != nil {
		return "", false, err
	}
	if real == def {
		return def, true, nil
	}
	// Anywhere else in the state dir or the slot dir its <id> mounts
	// would meet jaild's own entries (netns/<id> is the same id's pin).
	for _, d := range []string{stateDir, slotDir} {
		if nested(real, d) || nested(d, real) {
			return "", false, invalid(what, "%s: must be outside the state dir %s and the slot dir %s (or be %s, the default), and not hold them",
				root, stateDir, slotDir, def)
		}
	}
	return real, false, nil
}

// CheckWorkspaceRoot is jaild doctor's finding on a workspace root (empty:
// the state dir's default) of a jaild on stateDir (empty:
// DefaultStateDir): whether jaild would mount workspaces in it. It
// changes nothing; a root not made yet passes if root would make it.
func CheckWorkspaceRoot(root, stateDir string) Finding {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	f := Finding{Name: "workspace root", Required: true}
	state, err := trustedDir("state dir", stateDir, true)
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	real, def, err := vetWorkspaceRoot(root, state, SlotDir)
	if err == nil && !def {
		if _, serr := os.Lstat(real); serr == nil {
			err = checkWorkspaceRoot(root, real)
		}
	}
	switch {
	case err != nil:
		f.Detail = err.Error()
	case def:
		f.OK, f.Detail = true, real+" (the default, in the state dir)"
	default:
		f.OK, f.Detail = true, real+": only root can change or read it"
	}
	return f
}

// checkWorkspaceRoot checks, again before each workspace is mounted in it,
// that the operator's workspace root real (the real path of root) is
// still root's, closed to others and safe from other users.
func checkWorkspaceRoot(root, real string) error {
	got, err := trustedDir("workspace root", real, false)
	if err != nil {
		return err
	}
	if got != real {
		return &untrustedError{what: "workspace root", path: root, dir: real,
			problem: "now resolves to " + got, fix: "restart jaild to check the new path"}
	}
	var st unix.Stat_t
	if err := unix.Lstat(real, &st); err != nil {
		return fmt.Errorf("workspace root %s: %w", root, err)
	}
	if st.Mode&0o077 != 0 {
		return &untrustedError{what: "workspace root", path: root, dir: real,
			problem: fmt.Sprintf("is open to group or others (mode %04o), who could read the sandboxes' files in it", st.Mode&0o7777),
			fix:     "chmod 700 " + real + ", or give a directory of its own"}
	}
	return nil
}

// nested reports whether path is dir or below it (both clean).
func nested(path, dir string) bool { return dir == "/" || within(path, dir) }

// recordedWorkspaceDir is the tmpfs path of a workspace record: the one it
// keeps, if it is a path a workspace could have (absolute, clean, named by
// the record's id), or for a record that keeps none (written before
// workspace roots), the one its state root implies.
func recordedWorkspaceDir(rec *record) (string, error) {
	if rec.Dir == "" {
		dir, _ := workspacePaths(rec.StateRoot, rec.ID)
		return dir, nil
	}
	d := rec.Dir
	if !filepath.IsAbs(d) || filepath.Clean(d) != d || filepath.Base(d) != rec.ID {
		return "", fmt.Errorf("workspace record %s names the directory %q, not an absolute, clean <root>/%s: left alone", rec.ID, d, rec.ID)
	}
	return d, nil
}

// workspaceMount reports whether dir is a mount point, and fails if any
// mount on it is not a workspace tmpfs: the sweep unmounts only what jaild
// mounted there.
func workspaceMount(dir string) (bool, error) {
	mounts, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.Mountpoint != dir, false
	})
	if err != nil {
		return false, fmt.Errorf("read mounts: %w", err)
	}
	for _, mi := range mounts {
		if mi.FSType != "tmpfs" || mi.Source != workspaceSource {
			return true, fmt.Errorf("%s is a %s mount of %q, not a workspace's tmpfs: left alone", dir, mi.FSType, mi.Source)
		}
	}
	return len(mounts) > 0, nil
}

// checkWorkspaceRoot makes sure, before a workspace is mounted in it, that
// the workspace root is (still) safe: the default one is made if missing,
// root's own with mode 0700; the operator's one is checked again.
func (m *Manager) checkWorkspaceRoot() error {
	if !m.defaultWorkspaces {
		return checkWorkspaceRoot(m.workspaces, m.workspaces)
	}
	root, err := makeTrustedDir("workspace root", m.workspaces, 0o700)
	if err != nil {
		return err
	}
	if root != m.workspaces || filepath.Dir(root) != m.stateDir {
		return fmt.Errorf("jail: workspace root %s is not in the state dir %s", root, m.stateDir)
	}
	return nil
}

// mountTmpfs makes the directory dir (mode 0700) and mounts a workspace
// tmpfs with opts on it, nosuid and nodev.
func mountTmpfs(dir string, opts [][2]string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	data := ""
	for i, kv := range opts {
		if i > 0 {
			data += ","
		}
		data += kv[0] + "=" + kv[1]
	}
	if err := unix.Mount(workspaceSource, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount workspace: %w", err)
	}
	return nil
}
