package files

import (
	"context"
	"errors"
	"fmt"
	"path"

	"golang.org/x/sys/unix"
)

// Remove removes the file, symlink or directory (with everything in it)
// at p. A symlink is removed itself, never what it points to, and the walk
// of a directory opens each subdirectory by name with O_NOFOLLOW from its
// parent's descriptor, so a symlink met anywhere is unlinked, not
// followed. The workspace root itself cannot be removed.
func (f *FS) Remove(ctx context.Context, p string) error {
	comps, err := Split(p)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return f.pathErr("remove", ".", fmt.Errorf("%w: the workspace root cannot be removed", ErrBadPath))
	}
	dir, err := f.openDir(comps[:len(comps)-1])
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := comps[len(comps)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return f.pathErr("remove", rel(comps), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dir, name, 0); err != nil {
			return f.pathErr("remove", rel(comps), err)
		}
		return nil
	}
	return f.removeTree(ctx, dir, name, rel(comps), 0)
}

// removeTree removes the directory name in dir and everything below it;
// p names it in errors.
func (f *FS) removeTree(ctx context.Context, dir int, name, p string, depth int) error {
	if depth >= maxDepth {
		return f.pathErr("remove", p, ErrTooDeep)
	}
	// A few rounds: names created while this one empties the directory
	// (by a job still running in the session) make rmdir fail.
	for round := 0; ; round++ {
		if err := f.emptyDir(ctx, dir, name, p, depth); err != nil {
			return err
		}
		err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) || round == 3 {
			return f.pathErr("remove", p, err)
		}
	}
}

// emptyDir removes everything in the directory name in dir.
func (f *FS) emptyDir(ctx context.Context, dir int, name, p string, depth int) error {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return f.pathErr("remove", p, err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd, f.display(p))
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return f.pathErr("remove", path.Join(p, n), err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = f.removeTree(ctx, fd, n, path.Join(p, n), depth+1)
		} else {
			err = unix.Unlinkat(fd, n, 0)
			if errors.Is(err, unix.ENOENT) {
				err = nil
			} else if err != nil {
				err = f.pathErr("remove", path.Join(p, n), err)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
