package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// writeLocalTar writes the tree at dir as a tar archive, names relative to
// dir: directories, regular files, and symlinks as symlinks (not
// followed); fifos, sockets and devices are skipped.
func writeLocalTar(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		// PAX keeps the modification time's nanoseconds (USTAR would
		// round it to seconds); the other times are not restored.
		hdr.Format, hdr.AccessTime, hdr.ChangeTime = tar.FormatPAX, time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	return tw.Close()
}

// readLocalTar unpacks an archive from the daemon into dir (created if
// missing). The archive's content came from a sandbox: every name is
// opened through an os.Root on dir, which refuses any path (a "..", an
// absolute symlink, a symlink the archive made) that would lead out of
// it; devices and fifos are refused, setuid bits dropped. Files and
// directories get the entry's mode and modification time (directories
// last, since unpacking into them changes theirs).
func readLocalTar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name := strings.TrimLeft(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		if err := unpackLocal(root, tr, hdr, name, mode); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		if hdr.Typeflag == tar.TypeDir && !hdr.ModTime.IsZero() {
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		}
	}
}

func unpackLocal(root *os.Root, r io.Reader, hdr *tar.Header, name string, mode fs.FileMode) error {
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	case tar.TypeReg:
		// Removed first: a symlink there is replaced, not written
		// through.
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		// The mode as given, not as the umask left it.
		if err := f.Chmod(mode); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if hdr.ModTime.IsZero() {
			return nil
		}
		return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return root.Link(strings.TrimLeft(path.Clean("/"+hdr.Linkname), "/"), name)
	}
	return fmt.Errorf("entry type %q is not unpacked", hdr.Typeflag)
}
