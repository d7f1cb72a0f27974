package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
)

// What jaild keeps under its state dir is trusted as root: the rootfs
// template there becomes every sandbox's "/", libcontainer's state there
// names the processes jaild kills, and the slot records name the cgroups
// and state dirs any jaild removes. A user who could replace any of it
// could choose what sandboxes boot or what root deletes. So a directory is
// used only if no one but root can change what its path names: it and every
// parent up to / are owned by root and writable by no one else.
//
// One exception, for parents only: a root-owned sticky directory such as
// /tmp (mode 1777). In a sticky directory only an entry's owner (or the
// directory's) may rename or delete it, so others cannot move root's
// directory away or put another in its place; what they can do is create
// the name first, and then the owner check below refuses it. systemd's
// path checks (chase with CHASE_SAFE) likewise accept any root-owned
// parent. The directory itself must never be group or other writable,
// sticky or not: others could add entries to it.
//
// Group bits count even when the group is root's: a POSIX ACL granting
// write to anyone shows in the group bits too (as the ACL mask).

// maxSymlinks bounds the links followed in one path, as the kernel's
// ELOOP limit does.
const maxSymlinks = 40

// untrustedError reports a path that someone other than root could change.
type untrustedError struct {
	what, path string // "state dir" and the path as given
	dir        string // the part at fault: path, its real path or a parent
	problem    string // "is owned by uid 1000, not root"
	fix        string
}

func (e *untrustedError) Error() string {
	if e.dir == e.path {
		return fmt.Sprintf("jail: %s %s %s: %s", e.what, e.path, e.problem, e.fix)
	}
	return fmt.Sprintf("jail: %s %s: %s %s: %s", e.what, e.path, e.dir, e.problem, e.fix)
}

// Unwrap makes an untrusted prepared rootfs also an ErrRootfs, so that it
// is reported as every other unusable rootfs is.
func (e *untrustedError) Unwrap() []error {
	if e.what == "rootfs" {
		return []error{box.ErrUntrusted, box.ErrRootfs}
	}
	return []error{box.ErrUntrusted}
}

// trustedDir checks that no user but root can change what path names and
// returns its real path (symlinks resolved), which the caller must use from
// then on: the checks hold for that path, not for a link a user may swap.
// Symlinks on the way are followed only if root owns them, since a link's
// owner may remove it even from a sticky directory. If missingOK, a path
// whose tail does not exist yet is accepted up to where it stops (root
// creates the rest); the returned path then keeps that tail unresolved.
func trustedDir(what, path string, missingOK bool) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	c := &trustCheck{what: what, path: path, abs: abs}
	cur, missing, err := c.walk(missingOK)
	if err != nil {
		return "", err
	}
	if missing {
		return cur, nil
	}
	return c.checkDir(cur)
}

// trustCheck is one trustedDir check of path, whose absolute form is abs.
type trustCheck struct {
	what, path, abs string
}

func (c *trustCheck) bad(dir, problem, fix string) error {
	return &untrustedError{what: c.what, path: c.path, dir: dir, problem: problem, fix: fix}
}

func (c *trustCheck) fail(err error) error {
	return fmt.Errorf("%s %s: %w", c.what, c.path, err)
}

// parentFix is the fix for a parent dir at fault.
func (c *trustCheck) parentFix(dir, fix string) string {
	return fmt.Sprintf("%s, or use a %s outside %s", fix, c.what, dir)
}

// walk resolves abs one name at a time from /, as the kernel does, checking
// each parent directory before anything below it is trusted, and returns
// the real path of the directory itself, which it leaves to checkDir. If
// missingOK and a name does not exist, walk stops there and returns that
// path with the rest of abs unresolved, and missing set.
func (c *trustCheck) walk(missingOK bool) (cur string, missing bool, err error) {
	cur, todo, links := "/", split(c.abs), 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == ".." {
			cur = filepath.Dir(cur) // a parent already checked
			continue
		}
		next := filepath.Join(cur, name)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			if missingOK && errors.Is(err, unix.ENOENT) {
				return filepath.Join(append([]string{next}, todo...)...), true, nil
			}
			return "", false, c.fail(&os.PathError{Op: "lstat", Path: next, Err: err})
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			links++
			target, err := c.readLink(next, &st, links)
			if err != nil {
				return "", false, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(split(target), todo...)
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", false, c.bad(next, "is not a directory", "give a directory")
		}
		if len(todo) == 0 {
			return next, false, nil // the directory itself: for checkDir
		}
		if err := c.checkParent(next, &st); err != nil {
			return "", false, err
		}
		cur = next
	}
	return cur, false, nil
}

// readLink returns the target of the symlink link, whose lstat is st, the
// links-th followed in this walk, if root owns it.
func (c *trustCheck) readLink(link string, st *unix.Stat_t, links int) (string, error) {
	if st.Uid != 0 {
		return "", c.bad(link, fmt.Sprintf("is a symlink owned by uid %d, not root", st.Uid),
			fmt.Sprintf("chown -h root %s, or give the real path", link))
	}
	if links > maxSymlinks {
		return "", c.fail(&os.PathError{Op: "resolve", Path: c.abs, Err: unix.ELOOP})
	}
	target, err := os.Readlink(link)
	if err != nil {
		return "", c.fail(err)
	}
	return target, nil
}

// checkParent checks dir, a parent on the way, whose lstat is st: owned by
// root and writable by no one else unless sticky.
func (c *trustCheck) checkParent(dir string, st *unix.Stat_t) error {
	if err := checkOwner(st); err != "" {
		return c.bad(dir, err, c.parentFix(dir, "chown root "+dir))
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return c.bad(dir, writable(st), c.parentFix(dir, "chmod go-w "+dir))
	}
	return nil
}

// checkDir checks cur, the real path of the directory itself, strictly: a
// sticky bit does not keep others from adding entries. It returns cur.
func (c *trustCheck) checkDir(cur string) (string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(cur, &st); err != nil {
		return "", c.fail(&os.PathError{Op: "lstat", Path: cur, Err: err})
	}
	dir := c.path
	if cur != c.abs {
		dir = cur
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", c.bad(dir, "is not a directory", "give a directory")
	case checkOwner(&st) != "":
		return "", c.bad(dir, checkOwner(&st), "chown root "+cur)
	case st.Mode&0o022 != 0:
		return "", c.bad(dir, writable(&st), "chmod go-w "+cur)
	}
	return cur, nil
}

// makeTrustedDir checks path as trustedDir does, makes what is missing of
// it (only then, so that nothing is made through another user's symlink),
// checks it whole, sets its mode and returns its real path.
func makeTrustedDir(what, path string, mode os.FileMode) (string, error) {
	real, err := trustedDir(what, path, true)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(real); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(real, mode); err != nil {
			return "", fmt.Errorf("create %s: %w", what, err)
		}
		if real, err = trustedDir(what, real, false); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(real, mode); err != nil {
		return "", fmt.Errorf("create %s: %w", what, err)
	}
	return real, nil
}

// split returns the names of p, a path cleaned first, without empty ones.
func split(p string) []string {
	var names []string
	for _, n := range strings.Split(filepath.Clean(p), "/") {
		if n != "" && n != "." {
			names = append(names, n)
		}
	}
	return names
}

func checkOwner(st *unix.Stat_t) string {
	if st.Uid != 0 {
		return fmt.Sprintf("is owned by uid %d, not root", st.Uid)
	}
	return ""
}

func writable(st *unix.Stat_t) string {
	return fmt.Sprintf("is writable by group or others (mode %04o)", st.Mode&0o7777)
}

// CheckStateDir is jaild doctor's finding on the state dir (empty means
// DefaultStateDir) and the host-wide slot dir: whether anyone but root
// could change them. It changes nothing; a directory not made yet passes
// if root would make it.
func CheckStateDir(dir string) Finding {
	if dir == "" {
		dir = DefaultStateDir
	}
	f := Finding{Name: "state dir", Required: true}
	for _, d := range []struct{ what, path string }{{"state dir", dir}, {"slot dir", SlotDir}} {
		if _, err := trustedDir(d.what, d.path, true); err != nil {
			f.Detail = err.Error()
			return f
		}
	}
	f.OK = true
	f.Detail = fmt.Sprintf("%s and %s: only root can change them", dir, SlotDir)
	return f
}
