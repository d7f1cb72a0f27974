package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// ErrInvalid: the directory cannot serve as a sandbox root.
var ErrInvalid = errors.New("rootfs: invalid root")

// mountPoints are the directories every root must have, relative to it;
// the sandbox mounts over them. workDir is the working directory's
// absolute path in the sandbox.
func mountPoints(workDir string) []string {
	return []string{"proc", "dev", "tmp", strings.TrimPrefix(workDir, "/")}
}

// Root is a read-only root file system and the host paths bound into it.
type Root struct {
	// Dir is the directory that becomes "/".
	Dir string
	// WorkDir is where the sandbox's working directory is mounted, an
	// absolute path in the sandbox.
	WorkDir string
	// binds are host paths bind-mounted read-only at the same place.
	binds []string
	host  bool
}

// checkWorkDir rejects a working directory that no root can mount: the
// caller (package jail) has judged it otherwise.
func checkWorkDir(workDir string) error {
	if !filepath.IsAbs(workDir) || filepath.Clean(workDir) != workDir || workDir == "/" {
		return fmt.Errorf("%w: working directory %q is not an absolute, clean path below /", ErrInvalid, workDir)
	}
	return nil
}

// Binds are the host paths bound read-only at the same place in the
// sandbox (the host's /usr, ...): the rest of the sandbox's root is Dir.
func (r *Root) Binds() []string { return slices.Clone(r.binds) }

// Host reports whether r is the generated template over the host's /usr,
// which has /bin/sh and /usr/bin/env, rather than a prepared directory.
func (r *Root) Host() bool { return r.host }

// User describes the unprivileged user the command runs as.
type User struct {
	Name     string
	UID, GID int
}

// Open takes a prepared directory as the root, whose working directory is
// mounted at workDir: dir must have a directory there, reached through no
// symlink.
func Open(dir, workDir string) (*Root, error) {
	if err := checkWorkDir(workDir); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrInvalid, abs)
	}
	if err := checkTraversable(abs); err != nil {
		return nil, err
	}
	// The sandbox's root is a bind of dir and keeps its mount's flags: on
	// a noexec mount (systemd mounts /run so) nothing in it could run.
	var st unix.Statfs_t
	if err := unix.Statfs(abs, &st); err == nil && st.Flags&unix.ST_NOEXEC != 0 {
		return nil, fmt.Errorf("%w: %s is on a noexec mount; programs in it could not run", ErrInvalid, abs)
	}
	for _, mp := range mountPoints(workDir) {
		// Lstat each component: a symlink here would be followed by
		// the mount.
		for p := mp; p != "."; p = filepath.Dir(p) {
			fi, err := os.Lstat(filepath.Join(abs, p))
			if err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("%w: %s has no directory /%s to mount on (scripts/mkrootfs.sh makes one; mkdir -p %s)",
					ErrInvalid, abs, mp, filepath.Join(abs, mp))
			}
		}
	}
	return &Root{Dir: abs, WorkDir: workDir}, nil
}

// usrLinks are the top-level directories that merged-/usr hosts turn into
// symlinks into /usr.
var usrLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcBinds are host files under /etc that programs need and that hold
// nothing secret: the dynamic linker's cache and Debian's alternatives
// symlinks (awk, editor, ...).
var etcBinds = []string{"/etc/ld.so.cache", "/etc/alternatives"}

// entry is one file of the generated template.
type entry struct {
	path   string // relative to the root
	mode   os.FileMode
	link   string // symlink target
	data   string // file content
	isFile bool   // an empty mount-point file
}

// perm is the mode writeLayout gives the entry.
func (e entry) perm() os.FileMode {
	if e.isFile {
		return 0o644
	}
	return e.mode
}

// Host returns the default root, with u's home and the working directory's
// mount point at workDir, generating its template under stateDir if this
// host's layout has not been generated before. Templates are
// content-addressed and built under a temporary name then renamed, so
// concurrent jaild processes never see a half-built one.
func Host(stateDir string, u User, workDir string) (*Root, error) {
	if err := checkWorkDir(workDir); err != nil {
		return nil, err
	}
	entries, binds, err := hostLayout(u, workDir)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s\x00%o\x00%s\x00%s\x00%t\n", e.path, e.mode, e.link, e.data, e.isFile)
	}
	if err := checkTraversable(stateDir); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, "rootfs-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Lstat(dir); err != nil {
		tmp, err := os.MkdirTemp(stateDir, ".rootfs-")
		if err != nil {
			return nil, fmt.Errorf("create rootfs template: %w", err)
		}
		if err := writeLayout(tmp, entries); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("create rootfs template: %w", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			os.RemoveAll(tmp)
			if _, serr := os.Lstat(dir); serr != nil { // not lost to a concurrent builder
				return nil, fmt.Errorf("create rootfs template: %w", err)
			}
		}
	}
	if err := checkLayout(dir, entries, binds, workDir); err != nil {
		return nil, err
	}
	return &Root{Dir: dir, WorkDir: workDir, binds: binds, host: true}, nil
}

// checkLayout fails unless dir is the template es describes, as
// writeLayout made it: every entry root's, of its type, with its mode,
// size and link target, and no entry jaild did not make in the directories
// that no mount covers in the sandbox (the root and /etc; binds lists the
// host paths bound over the others). The template becomes every
// sandbox's "/", so one that was changed since (by a user who could once
// write to the state dir, say) is never used. Whoever else changes a file
// leaves it theirs, or needed write access that the mode check refuses, so
// contents are not read: only root could change them unnoticed, and this
// runs at every start of every one-shot run.
func checkLayout(dir string, es []entry, binds []string, workDir string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: template %s is not as jaild generated it: %s; remove it (rm -rf %s) and jaild generates it again",
			ErrInvalid, dir, fmt.Sprintf(format, args...), dir)
	}
	covered := make(map[string]bool)
	for _, mp := range mountPoints(workDir) {
		covered[mp] = true
	}
	for _, b := range binds {
		covered[strings.TrimPrefix(b, "/")] = true
	}
	children := map[string]map[string]bool{".": {}}
	for _, e := range es {
		parent := filepath.Dir(e.path)
		if children[parent] == nil {
			children[parent] = make(map[string]bool)
		}
		children[parent][filepath.Base(e.path)] = true
	}
	want := append([]entry{{path: ".", mode: 0o755}}, es...)
	for _, e := range want {
		p := filepath.Join(dir, e.path)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return bad("%s: %v", e.path, err)
		}
		if st.Uid != 0 {
			return bad("%s is owned by uid %d, not root", e.path, st.Uid)
		}
		typ := st.Mode & unix.S_IFMT
		switch {
		case e.link != "":
			if target, err := os.Readlink(p); typ != unix.S_IFLNK || err != nil || target != e.link {
				return bad("%s is not a symlink to %s", e.path, e.link)
			}
			continue
		case e.isFile || e.data != "":
			if typ != unix.S_IFREG {
				return bad("%s is not a regular file", e.path)
			}
			if st.Size != int64(len(e.data)) {
				return bad("%s has other content", e.path)
			}
		default:
			if typ != unix.S_IFDIR {
				return bad("%s is not a directory", e.path)
			}
			if covered[e.path] {
				break
			}
			names, err := dirNames(p)
			if err != nil {
				return bad("%s: %v", e.path, err)
			}
			for _, n := range names {
				if !children[e.path][n] {
					return bad("%s has an entry %s that jaild did not make", e.path, n)
				}
			}
		}
		// The layout's modes are plain permission bits.
		if got, want := st.Mode&0o7777, uint32(e.perm()); got != want {
			return bad("%s has mode %04o, not %04o", e.path, got, want)
		}
	}
	return nil
}

// dirNames lists the directory p, not following a symlink.
func dirNames(p string) ([]string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// checkTraversable fails if a sandbox's root could not reach dir. The
// sandbox mounts its root from inside its user namespace, where host root's
// directories are owned by nobody: every ancestor needs the o+x bit, or the
// start fails with a bare "permission denied".
func checkTraversable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s is not searchable by others (mode %v), so sandboxes cannot reach %s; chmod o+x it or use another directory",
				ErrInvalid, d, fi.Mode().Perm(), abs)
		}
		if d == "/" {
			return nil
		}
	}
}

// hostLayout is the template of u with the working directory workDir (an
// absolute, clean path), and the host paths bound into it. workDir and its
// parents are made as directories; one that is another entry of the
// template (/usr, /etc, a merged-/usr link...) is refused.
func hostLayout(u User, workDir string) ([]entry, []string, error) {
	es := []entry{
		{path: "usr", mode: 0o755}, {path: "etc", mode: 0o755},
		{path: "proc", mode: 0o555}, {path: "dev", mode: 0o755},
		// Only mount points: the sandbox mounts a tmpfs (mode 1777) on
		// /tmp. On the host no one but root may write in the template.
		{path: "tmp", mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: fmt.Sprintf(
			"root:x:0:0:root:/root:/bin/sh\n%s:x:%d:%d:%s:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			u.Name, u.UID, u.GID, u.Name, workDir)},
		{path: "etc/group", mode: 0o644, data: fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", u.Name, u.GID)},
		{path: "etc/hosts", mode: 0o644, data: "127.0.0.1\tlocalhost jaild\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{path: "etc/hostname", mode: 0o644, data: "jaild\n"},
		{path: "etc/nsswitch.conf", mode: 0o644, data: "passwd: files\ngroup: files\nhosts: files\n"},
		{path: "etc/resolv.conf", mode: 0o644, data: "# no network in the sandbox\n"},
		{path: "etc/mtab", link: "../proc/self/mounts"},
	}
	var binds []string
	for _, name := range usrLinks {
		hp := "/" + name
		fi, err := os.Lstat(hp)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(hp)
			if err != nil || !strings.HasPrefix(filepath.Clean(filepath.Join("/", target)), "/usr/") {
				continue // only links into /usr make sense in the sandbox
			}
			es = append(es, entry{path: name, link: target})
		case fi.IsDir():
			es = append(es, entry{path: name, mode: 0o755})
			binds = append(binds, hp)
		}
	}
	binds = append([]string{"/usr"}, binds...)
	for _, hp := range etcBinds {
		fi, err := os.Stat(hp)
		if err != nil {
			continue
		}
		es = append(es, entry{path: hp[1:], mode: 0o755, isFile: !fi.IsDir()})
		binds = append(binds, hp)
	}
	taken := make(map[string]bool, len(es))
	for _, e := range es {
		taken[e.path] = true
	}
	// Parents first, each an empty directory of its own: only the last
	// component is mounted over.
	rel := strings.TrimPrefix(workDir, "/")
	comps := strings.Split(rel, "/")
	for i := range comps {
		p := strings.Join(comps[:i+1], "/")
		if taken[p] {
			return nil, nil, fmt.Errorf("%w: working directory %s: /%s is part of the sandbox's root", ErrInvalid, workDir, p)
		}
		es = append(es, entry{path: p, mode: 0o755})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	return es, binds, nil
}

func writeLayout(dir string, es []entry) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, e := range es {
		p := filepath.Join(dir, e.path)
		var err error
		switch {
		case e.link != "":
			err = os.Symlink(e.link, p)
		case e.isFile || e.data != "":
			err = os.WriteFile(p, []byte(e.data), e.perm())
		default:
			err = os.Mkdir(p, e.mode)
		}
		if err == nil && e.link == "" {
			// Past the umask: with umask 077 the sandbox could read
			// nothing, and checkLayout expects exact modes.
			err = os.Chmod(p, e.perm())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Mounts returns the sandbox's mounts, in order: /proc, a minimal /dev,
// size-capped tmpfs /tmp and r.WorkDir (owned by u), and the read-only
// binds. If work is not empty, r.WorkDir is instead a read-write bind of
// that host directory (nosuid, nodev), which the caller sized and owns.
//
// /dev is a tmpfs that libcontainer fills with the configuration's devices
// and its symlinks, or, if dev is not empty, a read-only bind (nosuid,
// noexec) of that host directory, which the caller filled with them and
// with the mount points pts and shm (libcontainer then makes nothing in
// /dev).
func (r *Root) Mounts(tmpfsSize int64, u User, work, dev string) []*configs.Mount {
	size := strconv.FormatInt(tmpfsSize, 10)
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV
	devMount := &configs.Mount{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=65536k"}
	if dev != "" {
		devMount = &configs.Mount{Source: dev, Destination: "/dev", Device: "bind", Flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NOEXEC}
	}
	ms := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: nosuid | unix.MS_NOEXEC},
		devMount,
		{Source: "devpts", Destination: "/dev/pts", Device: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: nosuid | unix.MS_NOEXEC, Data: "mode=1777,size=" + size},
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: nosuid, Data: "mode=1777,size=" + size},
		{Source: "tmpfs", Destination: r.WorkDir, Device: "tmpfs", Flags: nosuid,
			Data: fmt.Sprintf("mode=755,size=%s,uid=%d,gid=%d", size, u.UID, u.GID)},
	}
	if work != "" {
		ms[len(ms)-1] = &configs.Mount{Source: work, Destination: r.WorkDir, Device: "bind", Flags: unix.MS_BIND | nosuid}
	}
	for _, b := range r.binds {
		ms = append(ms, &configs.Mount{
			Source: b, Destination: b, Device: "bind",
			Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | nosuid,
		})
	}
	return ms
}
