package jail

// Sandboxes' own roots: in a Manager with private mounts (see
// privatemounts.go), jaild itself mounts each sandbox's /tmp and /work (a
// fresh tmpfs, or its workspace's) on a root of the sandbox's own: the
// template bound recursively at <state dir>/roots/<id>/root, in the
// Manager's namespace. libcontainer's init binds its rootfs recursively, so the mounts
// come with it, and it makes two fewer of its own, each with its hardened
// path checks (docs/performance.md has the figures). Where the sandboxes
// share a /dev (see devdir.go), jaild also binds it beside the root, mounts
// the sandbox's /dev/pts and /dev/shm on it, and the config's /dev (a bind,
// which tells libcontainer to make no /dev of its own) binds that,
// submounts included: two more mounts fewer. The init copies the
// namespace as it starts; once libcontainer's Start has returned, jaild
// detaches its own copy of the root, so the Manager's mount table holds only
// the roots of sandboxes being started, however many are kept waiting.
//
// These mounts belong to the host's user namespace, not to the sandbox's: in
// the sandbox's namespace they are locked, as the template's binds are, and
// their owners are given as host uids (the sandbox's range starts at its
// hostID), so that the sandbox sees the owners and modes its own mounts had.
// The roots are made in a tmpfs of the private namespace: nothing of them is
// on the host, and they die with the process.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// roots is where a Manager with private mounts makes its sandboxes' own
// roots: a tmpfs mounted at dir in its namespace.
type roots struct {
	dir     string
	workDir string
}

// mountRoots mounts the tmpfs that sandboxes' own roots are made in, for a
// Manager with private mounts and the generated template (whose mount
// points jaild made and checked; see rootfs.Host).
func (m *Manager) mountRoots() error {
	dir, err := makeTrustedDir("roots dir", filepath.Join(m.stateDir, "roots"), 0o711)
	if err != nil {
		return err
	}
	// 0711: each sandbox's init, as the root of its user namespace, walks
	// through it to its root.
	if err := unix.Mount("jaild-roots", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0711,size=1m"); err != nil {
		return fmt.Errorf("jail: mount the sandboxes' roots: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("jail: make the sandboxes' roots private: %w", err)
	}
	m.roots = &roots{dir: dir, workDir: m.workDir}
	return nil
}

// unmount detaches the roots' tmpfs (Manager.Close).
func (r *roots) unmount() error {
	return unmountAll(r.dir)
}

// split returns the mounts of ms that a sandbox's own root holds, and the
// rest, which its libcontainer config keeps; with a shared /dev, the root
// holds /dev/pts and /dev/shm too.
func (r *roots) split(ms []*configs.Mount, sharedDev bool) (own, rest []*configs.Mount) {
	for _, mnt := range ms {
		switch d := mnt.Destination; {
		case d == "/tmp", d == r.workDir, sharedDev && (d == "/dev/pts" || d == "/dev/shm"):
			own = append(own, mnt)
		default:
			rest = append(rest, mnt)
		}
	}
	return own, rest
}

// sandboxRoot is a sandbox's own root in the Manager's namespace, until
// its init has copied it: <roots>/<id>/root, and, with a shared /dev,
// <roots>/<id>/dev.
type sandboxRoot struct {
	dir string
}

// make binds cfg.Rootfs at roots/<id>/root, makes the mounts of cfg that the
// root holds on it (those under /dev on roots/<id>/dev, a bind of the
// shared /dev, which the config's /dev then binds), leaves them out of cfg
// and points cfg.Rootfs at it. hostID is where the sandbox's uid range
// starts; dev is the path of the shared /dev, empty if there is none.
func (r *roots) make(id string, hostID int, cfg *configs.Config, dev string) (_ *sandboxRoot, err error) {
	own, rest := r.split(cfg.Mounts, dev != "")
	sr := &sandboxRoot{dir: filepath.Join(r.dir, id)}
	if err := unix.Mkdir(sr.dir, 0o711); err != nil {
		return nil, fmt.Errorf("jail: sandbox root: %w", err)
	}
	defer func() {
		if err != nil {
			if cerr := sr.close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	root := sr.dir + "/root"
	if err := unix.Mkdir(root, 0o711); err != nil {
		return nil, fmt.Errorf("jail: sandbox root: %w", err)
	}
	if err := unix.Mount(cfg.Rootfs, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("jail: bind the template as a sandbox's root: %w", err)
	}
	// A snapshot: nothing mounted on the host later reaches it.
	if err := unix.Mount("", root, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("jail: make a sandbox's root private: %w", err)
	}
	if dev != "" {
		if err := unix.Mkdir(sr.dir+"/dev", 0o711); err != nil {
			return nil, fmt.Errorf("jail: sandbox root: %w", err)
		}
		if err := bindOwn(dev, sr.dir+"/dev", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return nil, err
		}
		// A bind at /dev keeps libcontainer from making a /dev of its
		// own; this one brings the devpts and /dev/shm made below.
		for i, mnt := range rest {
			if mnt.Destination == "/dev" {
				bind := *mnt
				bind.Source, bind.Flags = sr.dir+"/dev", mnt.Flags|unix.MS_REC
				rest[i] = &bind
			}
		}
	}
	for _, mnt := range own {
		at := root
		if strings.HasPrefix(mnt.Destination, "/dev/") {
			at = sr.dir
		}
		if err := mountOwn(at, mnt, hostID); err != nil {
			return nil, err
		}
	}
	cfg.Mounts, cfg.Rootfs = rest, root
	return sr, nil
}

// mountOwn makes mnt, a tmpfs or a bind of a libcontainer config, on the
// root at dir, with the tmpfs's owners made host uids.
func mountOwn(dir string, mnt *configs.Mount, hostID int) error {
	dst := dir + mnt.Destination
	switch mnt.Device {
	case "tmpfs":
		if err := unix.Mount(mnt.Source, dst, "tmpfs", uintptr(mnt.Flags), hostOwned(mnt.Data, hostID)); err != nil {
			return fmt.Errorf("jail: mount a tmpfs at %s: %w", mnt.Destination, err)
		}
		return nil
	case "bind":
		return bindOwn(mnt.Source, dst, mnt.Flags)
	case "devpts":
		if err := unix.Mount(mnt.Source, dst, "devpts", uintptr(mnt.Flags), mnt.Data); err != nil {
			return fmt.Errorf("jail: mount a devpts at %s: %w", mnt.Destination, err)
		}
		// Its root and ptmx node belong to the mounter: the sandbox's
		// root, as when the init mounted it.
		for _, p := range []string{dst, dst + "/ptmx"} {
			if err := unix.Fchownat(unix.AT_FDCWD, p, hostID, hostID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("jail: devpts at %s: %w", mnt.Destination, err)
			}
		}
		return nil
	}
	return fmt.Errorf("jail: a sandbox's root cannot hold a %s mount", mnt.Device)
}

// mountAttrs pairs the mount flags a bind of a sandbox's root may carry
// with their mount_setattr attributes.
var mountAttrs = [...]struct {
	ms   int
	attr uint64
}{
	{unix.MS_RDONLY, unix.MOUNT_ATTR_RDONLY},
	{unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID},
	{unix.MS_NODEV, unix.MOUNT_ATTR_NODEV},
	{unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC},
}

// bindOwn binds src, a path or a /proc/<pid>/fd/<n> link to a directory or
// a detached mount, at dst with the attributes that flags (MS_*) name.
func bindOwn(src, dst string, flags int) error {
	attr := &unix.MountAttr{}
	for _, a := range mountAttrs {
		if flags&a.ms != 0 {
			attr.Attr_set |= a.attr
		}
	}
	err := bindClone(src, dst, attr, false, 0)
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.2 (no detached mounts either): a bind, then
		// its flags.
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("jail: bind %s: %w", dst, err)
		}
		if err := unix.Mount("", dst, "", uintptr(unix.MS_BIND|unix.MS_REMOUNT|flags), ""); err != nil {
			return fmt.Errorf("jail: remount %s: %w", dst, err)
		}
		return nil
	}
	return err
}

// bindClone binds a clone of src (with its submounts if recursive) at dst,
// with the attributes attr, by open_tree, mount_setattr and move_mount;
// move adds MOVE_MOUNT_* flags (moveMountBeneath). An error wraps the
// system call's (ENOSYS before Linux 5.2, 5.12 for mount_setattr).
func bindClone(src, dst string, attr *unix.MountAttr, recursive bool, move int) error {
	cloneFlags, setFlags := unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC, unix.AT_EMPTY_PATH
	if recursive {
		cloneFlags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, uint(cloneFlags))
	if err != nil {
		return fmt.Errorf("jail: clone %s: %w", src, err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", uint(setFlags), attr); err != nil {
		return fmt.Errorf("jail: set the attributes of the bind of %s: %w", src, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH|move); err != nil {
		return fmt.Errorf("jail: bind %s at %s: %w", src, dst, err)
	}
	return nil
}

// hostOwned returns the tmpfs options data with its uid and gid (ids of the
// sandbox's user namespace, root's if absent) made the host's, for a
// sandbox whose uid range starts at hostID.
func hostOwned(data string, hostID int) string {
	var out []string
	seen := map[string]bool{}
	for _, o := range strings.Split(data, ",") {
		k, v, ok := strings.Cut(o, "=")
		if ok && (k == "uid" || k == "gid") {
			if n, err := strconv.Atoi(v); err == nil {
				o = k + "=" + strconv.Itoa(hostID+n)
				seen[k] = true
			}
		}
		if o != "" {
			out = append(out, o)
		}
	}
	for _, k := range []string{"uid", "gid"} {
		if !seen[k] {
			out = append(out, k+"="+strconv.Itoa(hostID))
		}
	}
	return strings.Join(out, ",")
}

// close detaches the root (and its /dev) from the Manager's namespace and
// removes their mount points: the sandbox's init holds its own copy. Safe
// on nil and more than once.
func (sr *sandboxRoot) close() error {
	if sr == nil || sr.dir == "" {
		return nil
	}
	var errs []error
	for _, p := range []string{sr.dir + "/root", sr.dir + "/dev", sr.dir} {
		if err := unmountAndRemove(p, unix.Rmdir); err != nil {
			errs = append(errs, fmt.Errorf("jail: sandbox root: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	sr.dir = ""
	return nil
}
