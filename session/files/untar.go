package files

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMaxEntries is how many entries an archive may have if Untar is
// given no maximum.
const DefaultMaxEntries = 100_000

// Untar unpacks the tar archive r into the directory at p (created if
// missing, like Write's parents; symlinks on the way to it are followed
// inside the workspace as for any path). It returns how many entries it
// unpacked. Below p nothing is followed:
//
//   - names are taken relative to p: a leading "/" is dropped, and an
//     entry whose name has a ".." component is refused;
//   - every entry's parent directories are looked up from p's descriptor
//     with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so an entry below a symlink
//     (one the archive made, "x -> /etc" then "x/passwd", or one already
//     there) is refused, never followed;
//   - a regular file is written as Write writes (new file, renamed over
//     the name: a symlink there is replaced); a symlink is created as
//     given (it is only ever followed by lookups scoped to the workspace);
//     a hard link may only name a regular file unpacked earlier from the
//     same archive;
//   - devices, fifos and any other type are refused;
//   - everything is owned by the workspace's ids, with the entry's
//     permission bits (setuid and setgid dropped) and, for files, time.
//
// At most maxEntries entries (DefaultMaxEntries if zero or less) are
// unpacked; the kernel's quota bounds the bytes (ErrNoSpace). Unpacking
// stops at the first refused entry, with an error wrapping ErrBadTar,
// ErrTooLarge or ErrNoSpace that names it; the entries before it stay.
func (f *FS) Untar(ctx context.Context, p string, r io.Reader, maxEntries int) (int, error) {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	comps, err := Split(p)
	if err != nil {
		return 0, err
	}
	dest, err := f.mkdirAll(comps)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dest)
	u := &unpacker{f: f, dest: dest, base: rel(comps), files: map[string]bool{}}
	body := &errReader{r: r}
	tr := tar.NewReader(body)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			if body.err != nil {
				// The body's own error (too large, connection
				// lost): not the archive's fault.
				return n, body.err
			}
			return n, fmt.Errorf("%w: after %d entries: %w", ErrBadTar, n, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if n++; n > maxEntries {
			return n - 1, fmt.Errorf("%w: more than %d entries in the archive", ErrTooLarge, maxEntries)
		}
		if err := u.entry(ctx, hdr, tr); err != nil {
			return n - 1, err
		}
	}
}

// unpacker is one Untar.
type unpacker struct {
	f     *FS
	dest  int    // O_PATH descriptor of the directory unpacked into
	base  string // its path, for errors
	files map[string]bool
}

// entry unpacks one entry.
func (u *unpacker) entry(ctx context.Context, hdr *tar.Header, r io.Reader) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: entry %q: %s", ErrBadTar, hdr.Name, fmt.Sprintf(format, a...))
	}
	comps, err := entryComps(hdr.Name)
	if err != nil {
		return bad("%v", err)
	}
	if len(comps) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return nil // "./": the destination itself
		}
		return bad("no name")
	}
	key := strings.Join(comps, "/")
	p := u.base + "/" + key
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return bad("device nodes and fifos are not allowed")
	default:
		return bad("unsupported entry type %q", hdr.Typeflag)
	}
	parent, err := u.dir(comps[:len(comps)-1])
	if err != nil {
		return bad("%v", err)
	}
	defer unix.Close(parent)
	name := comps[len(comps)-1]
	delete(u.files, key)
	switch hdr.Typeflag {
	case tar.TypeReg:
		if _, err := u.f.writeAt(ctx, parent, name, p, r, fs.FileMode(hdr.Mode)&fs.ModePerm|fileModeSticky(hdr.Mode), hdr.ModTime); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		u.files[key] = true
		return nil
	case tar.TypeDir:
		return u.mkdir(parent, name, p, uint32(hdr.Mode)&0o1777)
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return bad("symlink without a target")
		}
		return u.replace(parent, name, p, func() error { return unix.Symlinkat(hdr.Linkname, parent, name) })
	default: // tar.TypeLink
		target, err := entryComps(hdr.Linkname)
		if err != nil || len(target) == 0 || !u.files[strings.Join(target, "/")] {
			return bad("hard link to %q, which is not a file unpacked from this archive", hdr.Linkname)
		}
		tdir, err := u.dir(target[:len(target)-1])
		if err != nil {
			return bad("%v", err)
		}
		defer unix.Close(tdir)
		// No AT_SYMLINK_FOLLOW: if the name was replaced by a
		// symlink since, the link is to the symlink itself. And a
		// hard link cannot leave the tmpfs anyway (EXDEV).
		if err := u.replace(parent, name, p, func() error { return unix.Linkat(tdir, target[len(target)-1], parent, name, 0) }); err != nil {
			return err
		}
		u.files[key] = true
		return nil
	}
}

// fileModeSticky maps tar's sticky bit to fs.ModeSticky.
func fileModeSticky(mode int64) fs.FileMode {
	if mode&unix.S_ISVTX != 0 {
		return fs.ModeSticky
	}
	return 0
}

// entryComps is the path of an entry relative to the destination.
func entryComps(name string) ([]string, error) {
	comps, err := Split(strings.TrimLeft(name, "/"))
	if err != nil {
		return nil, errors.New(`".." in the name`)
	}
	return comps, nil
}

// dir opens the directory comps below the destination, creating what is
// missing, through no symlink.
func (u *unpacker) dir(comps []string) (int, error) {
	fd, err := unix.Dup(u.dest)
	if err != nil {
		return -1, err
	}
	for i, c := range comps {
		next, err := openat2(fd, c, unix.O_PATH|unix.O_DIRECTORY, noLinks)
		if errors.Is(err, unix.ENOENT) {
			err = unix.Mkdirat(fd, c, 0o755)
			if err == nil {
				err = unix.Fchownat(fd, c, u.f.root.UID, u.f.root.GID, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openat2(fd, c, unix.O_PATH|unix.O_DIRECTORY, noLinks)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%s is a symlink, which an archive may not write through", strings.Join(comps[:i+1], "/"))
		}
		if errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%s is not a directory", strings.Join(comps[:i+1], "/"))
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", strings.Join(comps[:i+1], "/"), errnoErr(err))
		}
		fd = next
	}
	return fd, nil
}

// mkdir makes the directory name in parent, or keeps the one there, and
// gives it the workspace's ids and mode.
func (u *unpacker) mkdir(parent int, name, p string, mode uint32) error {
	err := u.replace(parent, name, p, func() error { return unix.Mkdirat(parent, name, 0o700) })
	if err != nil && !errors.Is(err, ErrIsDir) {
		return err
	}
	// Opened without following a symlink, then changed through the
	// descriptor: a symlink swapped in is never chmod-ed through.
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Fchown(fd, u.f.root.UID, u.f.root.GID)
		if err == nil {
			err = unix.Fchmod(fd, mode|0o700)
		}
		unix.Close(fd)
	}
	if err != nil {
		return u.f.pathErr("mkdir", p, err)
	}
	return nil
}

// replace runs create, which makes the name name in parent; if the name is
// taken by anything but a directory, that is removed first (as tar does).
// A directory there is ErrIsDir. A symlink made is given the workspace's
// ids.
func (u *unpacker) replace(parent int, name, p string, create func() error) error {
	err := create()
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return u.f.pathErr("create", p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return u.f.pathErr("create", p, ErrIsDir)
		}
		if err := unix.Unlinkat(parent, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return u.f.pathErr("create", p, err)
		}
		err = create()
	}
	if err != nil {
		return u.f.pathErr("create", p, err)
	}
	return unix.Fchownat(parent, name, u.f.root.UID, u.f.root.GID, unix.AT_SYMLINK_NOFOLLOW)
}

// errReader keeps the error of its reader other than io.EOF, to tell a
// body that failed from an archive that is bad.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}
