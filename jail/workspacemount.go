package jail

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A workspace's tmpfs is detached when the kernel allows it: made with
// fsopen and fsmount, mounted nowhere, held by jaild as a descriptor whose
// /proc/<pid>/fd/<n> path (see procFD) is the source of each sandbox's
// bind mount and the workspace's Dir. Every new sandbox's mount namespace
// starts as a copy of jaild's, so that a tmpfs mounted on the host for each
// session would make every sandbox start (and every teardown) pay for all
// the sessions; detached, jaild's mount table stays the same size however
// many sessions live. Nothing of it can be left behind: the kernel frees
// the tmpfs once jaild's descriptor and the sandboxes' binds are gone.
//
// A bind mount whose source is a detached mount needs a kernel that copies
// a mount out of a detached tree into another mount namespace (Linux 6.15
// or later: runc's init makes the bind in the sandbox's namespace, not in
// the one that made the tree); detachedMountsWork probes for it. Without
// it, or when the operator names a workspace root (whose point is that the
// workspaces are found there), each tmpfs is mounted at <root>/<id> as
// before.

// detachedTmpfs makes a detached tmpfs named source in mount tables, with
// mount options opts (the fsconfig keys and values of mount(8)'s -o) and
// the mount attributes attrs (unix.MOUNT_ATTR_*).
func detachedTmpfs(source string, attrs int, opts [][2]string) (*os.File, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "source", source); err != nil {
		return nil, fmt.Errorf("tmpfs source: %w", err)
	}
	for _, kv := range opts {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("tmpfs option %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("create tmpfs: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return nil, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return os.NewFile(uintptr(mnt), source), nil
}

// detachedWorkspace makes a workspace's detached tmpfs, nosuid and nodev,
// with mount options opts (see workspaceOpts).
func detachedWorkspace(opts [][2]string) (*os.File, error) {
	return detachedTmpfs(workspaceSource, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, opts)
}

// workspaceOpts are the tmpfs options of a workspace of size bytes whose
// root belongs to the sandbox user of the uid range at host. nr_inodes
// bounds the kernel memory that tiny files could take outside the size
// cap: one inode per 4 KiB of quota, at least 16384.
func workspaceOpts(size int64, host int) [][2]string {
	return [][2]string{
		{"size", strconv.FormatInt(size, 10)},
		{"nr_inodes", strconv.FormatInt(max(16384, size/4096), 10)},
		{"mode", "0755"},
		{"uid", strconv.Itoa(host + SandboxUID)},
		{"gid", strconv.Itoa(host + SandboxGID)},
	}
}

// attachedOnly makes Managers behave as on a kernel without detached
// mounts (tests).
var attachedOnly bool

// detachedMountsWork reports whether this kernel makes detached tmpfs
// mounts and copies them, as a sandbox's bind of one does: a clone of a
// detached tmpfs is refused (EINVAL) by kernels that only copy mounts of
// the caller's own namespace.
func detachedMountsWork() bool {
	mnt, err := detachedWorkspace([][2]string{{"size", "4096"}})
	if err != nil {
		return false
	}
	defer mnt.Close()
	clone, err := unix.OpenTree(int(mnt.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return false
	}
	unix.Close(clone)
	return true
}
