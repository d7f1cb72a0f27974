package files

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a workspace as the daemon knows it: the host path of its tmpfs
// and the host uid and gid that its files are created with (those of the
// sandbox user of the session's uid range: session.Session.HostIDs).
type Root struct {
	Dir      string
	UID, GID int
	// WorkDir is where the sandboxes see the workspace (their working
	// directory), which names its paths in errors and listings; empty
	// means /work.
	WorkDir string
	// Size is the workspace's size (its tmpfs quota): no download may
	// produce more (see ErrSparse). Zero means no bound.
	Size int64
	// Done, if not nil, is called once the Handler is done with the
	// workspace (the release of a hold on the session that keeps its
	// workspace mounted, session.Session.Use).
	Done func()
	// Closing, if not nil, is closed when the holder of the workspace
	// must let go at once (the session's removal has begun,
	// session.Session.Closing): the Handler then cuts its transfer.
	Closing <-chan struct{}
}

// The resolve flags of every lookup of a path a caller gave.
// RESOLVE_IN_ROOT makes the workspace root the root of the lookup: ".."
// at the root stays there and an absolute symlink target is taken from
// the root, so no symlink, however written, leads out of it.
// RESOLVE_NO_MAGICLINKS refuses /proc-style links (none should exist on
// a tmpfs, but a lookup must never depend on that) and RESOLVE_NO_XDEV
// any mount crossing: the workspace is one tmpfs and nothing may be
// reached beyond it.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// noLinks are the resolve flags of the lookups of archive entries: below
// the directory being unpacked into, and through no symlink at all, not
// even one that stays inside (an archive could have created it a moment
// ago, or the sandbox could be swapping it in).
const noLinks = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// maxDepth bounds how deep a recursive removal or archive goes, as each
// level holds a descriptor.
const maxDepth = 256

// FS is an open workspace. Every path it is given is relative to the
// workspace root (Root.WorkDir in the sandbox); leading slashes are
// ignored.
type FS struct {
	root   Root
	fd     int     // O_PATH descriptor of root.Dir
	charge Charger // nil: data is written from this process
	w      *writer // started at the first write with a Charger
}

// ChargeTo makes f write file data from a process that c starts (see
// [Charger]), so that the workspace's pages are charged to c's cgroup and
// not to the caller's. One process serves all of f's writes, until Close.
func (f *FS) ChargeTo(c Charger) { f.charge = c }

// Open opens the workspace r, and checks that it is one: a tmpfs whose root
// is the sandbox user's (r.UID). Dir leads through /proc/<pid> of the
// process that holds the workspace; were that process gone and its pid
// another's, Dir would lead elsewhere, which no one else can give that
// owner.
func Open(r Root) (*FS, error) {
	fd, err := unix.Open(r.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("files: open workspace %s: %w", r.Dir, err)
	}
	var st unix.Stat_t
	var fs unix.Statfs_t
	if err := unix.Fstat(fd, &st); err == nil {
		err = unix.Fstatfs(fd, &fs)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("files: open workspace %s: %w", r.Dir, err)
	}
	if fs.Type != unix.TMPFS_MAGIC || int(st.Uid) != r.UID {
		unix.Close(fd)
		return nil, fmt.Errorf("files: %s is not the workspace: its root is uid %d's on a filesystem of type %#x, not a tmpfs of uid %d", r.Dir, st.Uid, fs.Type, r.UID)
	}
	return &FS{root: r, fd: fd}, nil
}

// Close releases the workspace's descriptor and ends f's writer process.
func (f *FS) Close() error {
	var werr error
	if f.w != nil {
		werr = f.w.close()
		f.w = nil
	}
	return errors.Join(unix.Close(f.fd), werr)
}

// Split checks a path given by a caller and returns its components: empty
// for the workspace root. Empty and "." components are dropped; ".." is
// refused rather than resolved, since a caller has no reason to send one
// (symlinks are another matter: see the package doc).
func Split(p string) ([]string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return nil, &os.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%w: NUL byte in path", ErrBadPath)}
	}
	var comps []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, &os.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%w: \"..\" is not allowed", ErrBadPath)}
		}
		if len(c) > unix.NAME_MAX {
			return nil, &os.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%w: name too long", ErrBadPath)}
		}
		comps = append(comps, c)
	}
	return comps, nil
}

// rel is the path of comps for openat2: "." for the root.
func rel(comps []string) string {
	if len(comps) == 0 {
		return "."
	}
	return strings.Join(comps, "/")
}

// display is the workspace path p as the sandbox sees it.
func (f *FS) display(p string) string {
	wd := f.root.WorkDir
	if wd == "" {
		wd = "/work"
	}
	if p == "." || p == "" {
		return wd
	}
	return wd + "/" + strings.TrimPrefix(p, "/")
}

// openat2 is unix.Openat2 (always close-on-exec), retried on EINTR and on
// the EAGAIN the kernel answers when a rename elsewhere raced a lookup
// that could otherwise have been led out by "..".
func openat2(dirfd int, path string, flags, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, &how)
		if (errors.Is(err, unix.EAGAIN) && i < 64) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// openDir opens the directory at comps (symlinks followed inside the root)
// as an O_PATH descriptor.
func (f *FS) openDir(comps []string) (int, error) {
	fd, err := openat2(f.fd, rel(comps), unix.O_PATH|unix.O_DIRECTORY, inRoot)
	if err != nil {
		return -1, f.pathErr("open", rel(comps), err)
	}
	return fd, nil
}

// mkdirAll opens the directory at comps, creating what is missing of it,
// owned by the workspace's ids. Each level is looked up again from the
// root, so that a symlink met on the way is resolved as any other lookup
// resolves it; a dangling one is an error rather than a directory made
// somewhere else.
func (f *FS) mkdirAll(comps []string) (int, error) {
	fd, err := openat2(f.fd, rel(comps), unix.O_PATH|unix.O_DIRECTORY, inRoot)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return -1, f.pathErr("open", rel(comps), err)
		}
		return fd, nil
	}
	parent, err := f.openDir(nil)
	if err != nil {
		return -1, err
	}
	for i := range comps {
		fd, err := openat2(f.fd, rel(comps[:i+1]), unix.O_PATH|unix.O_DIRECTORY, inRoot)
		if errors.Is(err, unix.ENOENT) {
			err = unix.Mkdirat(parent, comps[i], 0o755)
			if err == nil {
				err = unix.Fchownat(parent, comps[i], f.root.UID, f.root.GID, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				// EEXIST: a dangling symlink, or a race; the
				// second lookup says which.
				fd, err = openat2(f.fd, rel(comps[:i+1]), unix.O_PATH|unix.O_DIRECTORY, inRoot)
			}
		}
		unix.Close(parent)
		if err != nil {
			return -1, f.pathErr("mkdir", rel(comps[:i+1]), err)
		}
		parent = fd
	}
	return parent, nil
}

// reopen opens the inode an O_PATH descriptor refers to, with flags, and
// checks that it is still the inode st describes. Through /proc/self/fd
// the kernel opens that very inode, not whatever a path names now, so
// nothing can be swapped in between the check of st and the open.
func reopen(pfd int, flags int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), flags|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		unix.Close(fd)
		return -1, errors.New("file changed while being opened")
	}
	return fd, nil
}

// openEntry opens what an O_PATH descriptor refers to, for reading, if it
// is a regular file or a directory: a fifo, socket or device is never
// opened (a fifo would block, a device's driver would be called).
func (f *FS) openEntry(pfd int, p string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, f.pathErr("stat", p, err)
	}
	flags := unix.O_RDONLY
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		flags |= unix.O_DIRECTORY
	default:
		return nil, f.pathErr("open", p, ErrNotRegular)
	}
	fd, err := reopen(pfd, flags, &st)
	if err != nil {
		return nil, f.pathErr("open", p, err)
	}
	return os.NewFile(uintptr(fd), f.display(p)), nil
}

// Open opens the file or directory at p for reading; symlinks are followed
// inside the workspace. Anything else than a regular file or a directory
// is ErrNotRegular, and is not opened.
func (f *FS) Open(p string) (*os.File, error) {
	comps, err := Split(p)
	if err != nil {
		return nil, err
	}
	pfd, err := openat2(f.fd, rel(comps), unix.O_PATH, inRoot)
	if err != nil {
		return nil, f.pathErr("open", rel(comps), err)
	}
	defer unix.Close(pfd)
	return f.openEntry(pfd, rel(comps))
}
