package files

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// WriteTar writes the directory dir (from [FS.Open]) as a tar archive to
// w, with names relative to dir. Directories and regular files are stored
// with their mode and time, symlinks as symlinks (never followed), a file
// with several names in the tree once and then as hard links to it, and
// fifos, sockets and devices are skipped. Owners are stored as 0: the
// workspace's host ids mean nothing to the reader. A file that shrinks
// while it is read is padded with zeros to the size its header gave.
//
// If max is positive, the files' data may not add up to more than max
// bytes (a file's apparent size counts, holes included: archive/tar writes
// no sparse entries, so a sparse file's holes would be sent as zeros);
// beyond it WriteTar stops with an error wrapping ErrSparse. See TarSize
// to refuse such a tree before anything is written.
func WriteTar(ctx context.Context, dir *os.File, w io.Writer, max int64) error {
	tw := tar.NewWriter(w)
	t := &tarOut{tw: tw, seen: map[uint64]string{}, left: max, bounded: max > 0}
	if err := t.tree(ctx, int(dir.Fd()), "", dir.Name(), 0); err != nil {
		return err
	}
	return tw.Close()
}

// tarOut is one WriteTar.
type tarOut struct {
	tw      *tar.Writer
	seen    map[uint64]string // inode -> first name, for hard links
	left    int64             // bytes of file data still allowed, if bounded
	bounded bool
}

// take counts a file of size bytes against the bound.
func (t *tarOut) take(p string, size int64) error {
	if !t.bounded {
		return nil
	}
	if size > t.left {
		return &os.PathError{Op: "tar", Path: p, Err: fmt.Errorf("%w: the archive would hold more than the workspace's size", ErrSparse)}
	}
	t.left -= size
	return nil
}

// TarSize is the data WriteTar would write for dir now: the apparent sizes
// of its regular files, each inode once.
func TarSize(ctx context.Context, dir *os.File) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	var walk func(fd int, p string, depth int) error
	walk = func(fd int, p string, depth int) error {
		if depth >= maxDepth {
			return &os.PathError{Op: "tar", Path: p, Err: ErrTooDeep}
		}
		names, err := readNames(fd, p)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				if !seen[st.Ino] {
					seen[st.Ino] = true
					total += st.Size
				}
			case unix.S_IFDIR:
				sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				err = walk(sub, path.Join(p, name), depth+1)
				unix.Close(sub)
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(int(dir.Fd()), dir.Name(), 0)
	// The walk read dir's entries: rewind, for WriteTar to read them again.
	if _, serr := unix.Seek(int(dir.Fd()), 0, io.SeekStart); err == nil && serr != nil {
		err = &os.PathError{Op: "tar", Path: dir.Name(), Err: serr}
	}
	return total, err
}

// tree writes the entries of the directory fd, named prefix in the
// archive and p in errors.
func (t *tarOut) tree(ctx context.Context, fd int, prefix, p string, depth int) error {
	if depth >= maxDepth {
		return &os.PathError{Op: "tar", Path: p, Err: ErrTooDeep}
	}
	names, err := readNames(fd, p)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := t.entry(ctx, fd, name, prefix+name, path.Join(p, name), depth); err != nil {
			return err
		}
	}
	return nil
}

// writeEntry writes the entry name of the directory fd.
func (t *tarOut) entry(ctx context.Context, fd int, name, arcName, p string, depth int) error {
	tw, seen := t.tw, t.seen
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed since the directory was read
		}
		return &os.PathError{Op: "tar", Path: p, Err: err}
	}
	hdr := &tar.Header{
		Name:    arcName,
		Mode:    int64(st.Mode & 0o7777),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "tar", Path: p, Err: err}
		}
		defer unix.Close(sub)
		hdr.Typeflag, hdr.Name = tar.TypeDir, arcName+"/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		return t.tree(ctx, sub, arcName+"/", p, depth+1)
	case unix.S_IFLNK:
		target, err := readlinkat(fd, name)
		if err != nil {
			return nil // replaced since
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		if first, ok := seen[st.Ino]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return tw.WriteHeader(hdr)
		}
		return t.file(fd, name, p, hdr)
	default:
		return nil // fifos, sockets and devices are not archived
	}
}

// writeFile writes the regular file name of the directory fd, opened
// without following a symlink and only once it is known to be regular.
func (t *tarOut) file(fd int, name, p string, hdr *tar.Header) error {
	tw, seen := t.tw, t.seen
	pfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // removed or replaced since
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	rfd, err := reopen(pfd, unix.O_RDONLY, &st)
	if err != nil {
		return &os.PathError{Op: "tar", Path: p, Err: err}
	}
	file := os.NewFile(uintptr(rfd), p)
	defer file.Close()
	if err := t.take(p, st.Size); err != nil {
		return err
	}
	if st.Nlink > 1 {
		seen[st.Ino] = hdr.Name
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(file, st.Size))
	if err != nil {
		return fmt.Errorf("tar %s: %w", p, err)
	}
	if n < st.Size {
		_, err = io.CopyN(tw, zeros{}, st.Size-n)
	}
	return err
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
