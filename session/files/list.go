package files

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
)

// List lists the directory dir (from [FS.Open]): every entry with its
// type, size, mode and time, as lstat sees it. Symlinks are listed with
// their target as written and are never followed.
func List(dir *os.File) (*api.FileList, error) {
	fd := int(dir.Fd())
	names, err := readNames(fd, dir.Name())
	if err != nil {
		return nil, err
	}
	out := &api.FileList{Path: dir.Name(), Entries: make([]api.FileInfo, 0, len(names))}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed since it was read
		}
		fi := api.FileInfo{
			Name:    name,
			Size:    st.Size,
			Mode:    fmt.Sprintf("%04o", st.Mode&0o7777),
			ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			fi.Type = "file"
		case unix.S_IFDIR:
			fi.Type = "dir"
		case unix.S_IFLNK:
			fi.Type = "symlink"
			fi.Target, _ = readlinkat(fd, name)
		default:
			fi.Type = "other"
		}
		out.Entries = append(out.Entries, fi)
	}
	return out, nil
}

// readNames reads every name in the directory fd (p names it in errors),
// sorted. It reads names only (getdents): os.File.ReadDir could lstat an
// entry by a path string, and an os.File would close fd when collected.
func readNames(fd int, p string) ([]string, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "readdir", Path: p, Err: err}
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	return names, nil
}

// readlinkat reads a symlink's target, however long.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return strings.Clone(string(buf[:n])), nil
		}
	}
}
