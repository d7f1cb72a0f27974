package files

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Errors a caller may test for with [errors.Is]. Operations return them
// wrapped in an *os.PathError that names the path as the sandbox sees it
// (/work/...), so that the message reads "open /work/x: not found".
var (
	// ErrNotFound: no such file or directory (or a symlink whose target
	// does not exist inside the workspace).
	ErrNotFound = errors.New("no such file or directory")
	// ErrIsDir: a directory where a file was expected.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a file where a directory was expected.
	ErrNotDir = errors.New("not a directory")
	// ErrNotRegular: a fifo, socket or device node; never opened.
	ErrNotRegular = errors.New("not a regular file or directory")
	// ErrExists: a name is taken by something that cannot be replaced.
	ErrExists = errors.New("already exists")
	// ErrNotEmpty: a directory that something else keeps filling.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrBadPath: a path with "..", a NUL byte or too long a name, the
	// workspace root where it cannot be used, a symlink loop, or a path
	// that would cross a mount.
	ErrBadPath = errors.New("bad path")
	// ErrNoSpace: the workspace's quota is used up (the kernel's ENOSPC
	// on its tmpfs).
	ErrNoSpace = errors.New("workspace is full")
	// ErrTooLarge: an upload larger than Options.MaxUpload, or an archive
	// with more entries than Options.MaxEntries.
	ErrTooLarge = errors.New("too large")
	// ErrBadTar: an archive that cannot be read, or an entry that is
	// refused (a device, a fifo, "..", a path through a symlink, a hard
	// link to a name outside the archive).
	ErrBadTar = errors.New("bad tar archive")
	// ErrSparse: a download that would produce more bytes than the
	// workspace can hold: a file whose apparent size is larger (a sparse
	// file, `truncate -s 1P`), or a tree whose files add up to more. Holes
	// cost the workspace nothing and would be sent as zeros.
	ErrSparse = errors.New("larger than the workspace (a sparse file?)")
	// ErrTooDeep: a directory tree nested deeper than maxDepth levels.
	ErrTooDeep = errors.New("directory tree too deep")
)

// errnoErr turns what the kernel answered into one of the sentinels where
// one fits, so that the handler can pick a status without knowing errnos.
func errnoErr(err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.ENOENT:
		return ErrNotFound
	case unix.EISDIR:
		return ErrIsDir
	case unix.ENOTDIR:
		return ErrNotDir
	case unix.EEXIST:
		return ErrExists
	case unix.ENOTEMPTY:
		return ErrNotEmpty
	case unix.ENOSPC, unix.EDQUOT:
		return ErrNoSpace
	case unix.EFBIG:
		return ErrTooLarge
	case unix.ELOOP:
		return fmt.Errorf("%w: too many levels of symbolic links", ErrBadPath)
	case unix.EXDEV:
		return fmt.Errorf("%w: crosses a mount point", ErrBadPath)
	case unix.ENAMETOOLONG:
		return fmt.Errorf("%w: name too long", ErrBadPath)
	}
	return err
}

// pathErr is the error of op on the workspace path p (relative to the
// workspace root).
func (f *FS) pathErr(op, p string, err error) error {
	return &os.PathError{Op: op, Path: f.display(p), Err: errnoErr(err)}
}
