package jail

// Private mounts: the host paths every sandbox binds read-only (the root
// template's /usr, /etc/ld.so.cache, ...) are bound into the template once,
// in a mount namespace that the Manager's process has to itself, instead of
// by each sandbox's init. libcontainer binds the template recursively as the
// sandbox's root, so the binds come with it, and each one it no longer makes
// saves the init a mount, a remount and their hardened path checks.
//
// The daemon's worker is such a process: the front end starts it with
// CLONE_NEWNS (see internal/worker). Nothing it mounts is seen from outside:
// the front end reaches its workspaces by descriptor (detached) or through
// /proc/<worker's pid>/root (mounted at a path of its namespace), which is
// why an operator's workspace root, meant to be seen on the host, keeps the
// host's namespace. When the worker dies, the namespace and its mounts go
// with it: nothing to sweep but the empty mount points.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// PrivateMountsWork reports whether a Manager with the workspace root
// workspaceRoot (Config.WorkspaceRoot) may be given a mount namespace of its
// own (Config.PrivateMounts): only with the default root. Its workspaces are
// then reached by other processes by descriptor (detached) or through
// /proc/<pid>/root; an operator's root is a place on the host where they
// are expected to be seen.
func PrivateMountsWork(workspaceRoot string) bool {
	return workspaceRoot == ""
}

// OwnMountNamespace reports whether this process's mount namespace is not
// its parent's: whoever started it made one for it.
func OwnMountNamespace() (bool, error) {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false, err
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt")
	if err != nil {
		return false, err
	}
	return own != parent, nil
}

// checkPrivateMounts refuses Config.PrivateMounts where the namespace may
// not be this process's alone, where it is its parent's (nobody made one
// for it), and with an operator's workspace root; otherwise it sets the
// root through which others reach this namespace's mounts.
func (m *Manager) checkPrivateMounts() error {
	if !m.defaultWorkspaces {
		return errors.New("jail: private mounts need the default workspace root: an operator's is where the workspaces are seen on the host")
	}
	own, err := OwnMountNamespace()
	if err != nil {
		return fmt.Errorf("jail: private mounts: %w", err)
	}
	if !own {
		return errors.New("jail: private mounts asked for, but this process shares its parent's mount namespace")
	}
	m.ownRoot = "/proc/" + strconv.Itoa(os.Getpid()) + "/root"
	return nil
}

// templateBinds are the host paths bound into the root template in this
// process's private mount namespace.
type templateBinds struct {
	srcs []string // the host paths, as the root lists them
	log  func(msg string, args ...any)

	mu    sync.Mutex
	binds []templateBind // srcs[i]'s latest bind
}

// templateBind is one host path bound at dst, and the file it was when
// bound.
type templateBind struct {
	src, dst string
	dev, ino uint64
}

// bindTemplate makes this process's mount namespace a slave of the one it
// was copied from (mounts made here go nowhere else; the host's still come
// in), then binds each of the root's host paths into the template.
func (m *Manager) bindTemplate() error {
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("jail: private mounts: make / a slave: %w", err)
	}
	t := &templateBinds{srcs: m.root.Binds(), log: m.log.Info}
	for _, b := range t.srcs {
		bd, err := bindReadOnly(b, m.root.Dir+b, false)
		if err != nil {
			return err
		}
		t.binds = append(t.binds, bd)
	}
	m.bound = t
	return nil
}

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux 6.5), which x/sys lacks.
const moveMountBeneath = 0x200

// bindReadOnly binds src at dst, read-only, nosuid and nodev, submounts
// included, and returns what it bound. With beneath (Linux 6.5), the new
// bind goes under the one on dst, which the caller then detaches.
func bindReadOnly(src, dst string, beneath bool) (templateBind, error) {
	// Taken before the bind: were src replaced in between, refresh would
	// find it changed and bind it again, never the other way round.
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return templateBind{}, fmt.Errorf("jail: bind %s: %w", src, err)
	}
	b := templateBind{src: src, dst: dst, dev: st.Dev, ino: st.Ino}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if beneath {
		return b, bindClone(src, dst, attr, true, moveMountBeneath)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return b, fmt.Errorf("jail: bind %s at %s: %w", src, dst, err)
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		// Before Linux 5.12: the top mount only, as a sandbox's own
		// read-only bind would be.
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			_ = unix.Unmount(dst, unix.MNT_DETACH)
			return b, fmt.Errorf("jail: make %s read-only: %w", dst, err)
		}
	}
	return b, nil
}

// refresh binds again each host path that is no longer the file it bound:
// a sandbox that bound it itself would see the new one (ldconfig replaces
// /etc/ld.so.cache by a rename). A stat per path for each sandbox. The new
// bind goes beneath the old, which is then detached: a sandbox started
// meanwhile sees one or the other. Before Linux 6.5 the old one is
// detached first, and a sandbox started in between sees the template's
// empty placeholder there.
func (t *templateBinds) refresh() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, b := range t.binds {
		var st unix.Stat_t
		if err := unix.Stat(b.src, &st); err != nil {
			return fmt.Errorf("jail: %s: %w", b.src, err)
		}
		if st.Dev == b.dev && st.Ino == b.ino {
			continue
		}
		nb, err := bindReadOnly(b.src, b.dst, true)
		if err == nil {
			err = unix.Unmount(b.dst, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		} else if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			if err = unmountAll(b.dst); err == nil {
				nb, err = bindReadOnly(b.src, b.dst, false)
			}
		}
		if err != nil {
			return err
		}
		t.binds[i] = nb
		t.log("host path replaced: bound again for new sandboxes", "path", b.src)
	}
	return nil
}

// unmount detaches the binds: a closed Manager leaves nothing in its
// namespace. Sandboxes still running keep their own copies.
func (t *templateBinds) unmount() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, b := range t.binds {
		if err := unmountAll(b.dst); err != nil {
			errs = append(errs, err)
		}
	}
	t.binds = nil
	return errors.Join(errs...)
}

// drop leaves out of ms the binds of the template's host paths.
func (t *templateBinds) drop(ms []*configs.Mount) []*configs.Mount {
	out := ms[:0:0]
	for _, mnt := range ms {
		if t.has(mnt) {
			continue
		}
		out = append(out, mnt)
	}
	return out
}

func (t *templateBinds) has(mnt *configs.Mount) bool {
	if mnt.Device != "bind" {
		return false
	}
	for _, src := range t.srcs {
		if mnt.Source == src && mnt.Destination == src {
			return true
		}
	}
	return false
}
