package jail

import (
	"errors"
	"fmt"
	"os"
	"path"

	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"
)

// A sandbox's /dev is, where the kernel allows it, one read-only bind of a
// tmpfs that jaild fills once and every sandbox of the Manager shares: a
// bind at /dev tells libcontainer's init to make nothing there. Otherwise
// the init mounts a tmpfs at /dev, bind-mounts each host device node onto a
// file it creates in it (a user namespace cannot mknod) and makes the
// symlinks, every step a path-checked mount or lookup, for every sandbox.
//
// The shared /dev holds what the init would have made, the same way: the
// nodes of specconv.AllowedDevices that have a path (null, zero, full,
// random, urandom, tty), with their modes and owned by host root as the
// host's nodes are; the symlinks ptmx, fd, stdin, stdout, stderr (and core
// where /proc/kcore exists); and the mount points pts and shm, on which
// each sandbox gets its own devpts and /dev/shm tmpfs (mounted by its init,
// or, with private mounts, by jaild: see sandboxroot.go). Isolation is
// unchanged: the cgroup device rules are the same, the nodes are the same
// devices, and no sandbox can write to the tmpfs: it is made read-only
// before any sandbox exists, each bind is read-only too, and in the
// sandbox's user namespace the kernel locks both. A sandbox's command,
// which is not root, could not write to the /dev tmpfs either.
//
// The tmpfs is detached like a workspace's (see workspacemount.go): jaild
// holds it as a descriptor, each sandbox binds /proc/<pid>/fd/<n>, and
// nothing is left on the host when jaild exits. Its kernel requirement is
// the workspaces'; without it sandboxes get the init's /dev.

// devSource is the source name of the shared /dev tmpfs in mount tables.
const devSource = "jaild-dev"

// devSymlinks are the links libcontainer's init makes in a /dev of its
// own, target first.
var devSymlinks = [][2]string{
	{"pts/ptmx", "ptmx"},
	{"/proc/self/fd", "fd"},
	{"/proc/self/fd/0", "stdin"},
	{"/proc/self/fd/1", "stdout"},
	{"/proc/self/fd/2", "stderr"},
}

// newSharedDev makes the shared /dev (see above), read-only once filled.
func newSharedDev() (f *os.File, err error) {
	// A few small inodes: nothing can be written to it once it is done.
	// Not nodev: its device nodes are the point.
	opts := [][2]string{{"mode", "0755"}, {"size", "4096"}, {"nr_inodes", "64"}}
	if f, err = detachedTmpfs(devSource, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, opts); err != nil {
		return nil, err
	}
	mnt := int(f.Fd())
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := fillDev(mnt); err != nil {
		return nil, err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(mnt, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return nil, fmt.Errorf("make /dev read-only: %w", err)
	}
	return f, nil
}

// fillDev makes the nodes, links and mount points of the shared /dev in
// the tmpfs at the descriptor dir.
func fillDev(dir int) error {
	for _, d := range specconv.AllowedDevices {
		if d.Path == "" {
			continue
		}
		name := path.Base(d.Path)
		if path.Dir(d.Path) != "/dev" || d.Type != 'c' {
			return fmt.Errorf("shared /dev: device %s is not a character device in /dev", d.Path)
		}
		perm := uint32(d.FileMode.Perm())
		if err := unix.Mknodat(dir, name, unix.S_IFCHR|perm, int(unix.Mkdev(uint32(d.Major), uint32(d.Minor)))); err != nil {
			return fmt.Errorf("shared /dev: mknod %s: %w", name, err)
		}
		// Past the umask.
		if err := unix.Fchmodat(dir, name, perm, 0); err != nil {
			return fmt.Errorf("shared /dev: chmod %s: %w", name, err)
		}
		if err := unix.Fchownat(dir, name, int(d.Uid), int(d.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("shared /dev: chown %s: %w", name, err)
		}
	}
	links := devSymlinks
	if _, err := os.Stat("/proc/kcore"); err == nil {
		links = append(links, [2]string{"/proc/kcore", "core"})
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shared /dev: %w", err)
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], dir, l[1]); err != nil {
			return fmt.Errorf("shared /dev: symlink %s: %w", l[1], err)
		}
	}
	for _, mp := range []string{"pts", "shm"} {
		if err := unix.Mkdirat(dir, mp, 0o755); err != nil {
			return fmt.Errorf("shared /dev: mkdir %s: %w", mp, err)
		}
		if err := unix.Fchmodat(dir, mp, 0o755, 0); err != nil {
			return fmt.Errorf("shared /dev: chmod %s: %w", mp, err)
		}
	}
	return nil
}
