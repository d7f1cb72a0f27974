package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultMode is the mode of a file written without one.
const DefaultMode fs.FileMode = 0o644

// Write writes r to the file at p, creating its missing parent directories
// (0755), owned by the workspace's ids, with mode's permission bits
// (DefaultMode if zero; setuid and setgid are dropped: the workspace is
// nosuid anyway). The data goes to a new file in the same directory, which
// is then renamed over p: a reader never sees half a file, a hard link to
// the old file keeps the old content, and a symlink at p is replaced, not
// written through. It returns the number of bytes written. A full
// workspace is ErrNoSpace, and the partial file is removed.
func (f *FS) Write(ctx context.Context, p string, r io.Reader, mode fs.FileMode) (int64, error) {
	return f.WriteStamped(ctx, p, r, mode, time.Time{})
}

// WriteStamped is Write that gives the file the modification time mtime
// (to the nanosecond; zero leaves the time of the write), as a copy that
// keeps times does: make compares them.
func (f *FS) WriteStamped(ctx context.Context, p string, r io.Reader, mode fs.FileMode, mtime time.Time) (int64, error) {
	comps, err := Split(p)
	if err != nil {
		return 0, err
	}
	if len(comps) == 0 {
		return 0, f.pathErr("write", ".", ErrIsDir)
	}
	dir, err := f.mkdirAll(comps[:len(comps)-1])
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	return f.writeAt(ctx, dir, comps[len(comps)-1], rel(comps), r, mode, mtime)
}

// writeAt writes r to a new file in dir and renames it to name; p names it
// in errors. A zero mtime leaves the time of the write.
func (f *FS) writeAt(ctx context.Context, dir int, name, p string, r io.Reader, mode fs.FileMode, mtime time.Time) (int64, error) {
	if mode == 0 {
		mode = DefaultMode
	}
	perm := uint32(mode.Perm())
	if mode&fs.ModeSticky != 0 {
		perm |= unix.S_ISVTX
	}
	tmp := tempName()
	// O_EXCL never follows a symlink, and the name is unpredictable:
	// this creates a new inode or fails.
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, f.pathErr("create", p, err)
	}
	file := os.NewFile(uintptr(fd), f.display(p))
	n, err := func() (int64, error) {
		defer file.Close()
		if err := unix.Fchown(fd, f.root.UID, f.root.GID); err != nil {
			return 0, err
		}
		if err := unix.Fchmod(fd, perm); err != nil {
			return 0, err
		}
		n, err := f.copy(ctx, file, r)
		if err != nil {
			return n, err
		}
		if !mtime.IsZero() {
			ts := unix.NsecToTimespec(mtime.UnixNano())
			if err := unix.UtimesNanoAt(fd, "", []unix.Timespec{ts, ts}, unix.AT_EMPTY_PATH); err != nil {
				return n, err
			}
		}
		return n, nil
	}()
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the write's error, named by p below
		}
		return n, f.pathErr("write", p, err)
	}
	return n, nil
}

// tempName is a name no one can guess, hidden from ls.
func tempName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ".jaild-upload-" + hex.EncodeToString(b)
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// copy writes r to the new file: through the writer process if the FS has
// a Charger (see writer.go), else from this process.
func (f *FS) copy(ctx context.Context, file *os.File, r io.Reader) (int64, error) {
	if f.charge == nil {
		return io.Copy(file, ctxReader{ctx, r})
	}
	if f.w == nil {
		w, err := startWriter(f.charge)
		if err != nil {
			return 0, err
		}
		f.w = w
	}
	n, err := f.w.copy(ctx, int(file.Fd()), r)
	if f.w.dead {
		f.w = nil // reaped; the next write starts another
	}
	return n, err
}
