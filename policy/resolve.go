package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPath is the PATH a sandbox starts with unless the request's env
// sets one (jail.Path; this package imports nothing of jaild's).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultCwd is where a sandbox's command starts unless the request says,
// in sandboxes whose working directory is the default one (box.DefaultDir).
const DefaultCwd = "/work"

// A Resolver finds the executable file name would run as in the sandbox:
// looked up in pathEnv (DefaultPath when empty) unless it holds a slash,
// relative to cwd (the sandbox's working directory, DefaultCwd unless the
// resolver knows another, when empty) if it is relative. It returns
// the file's path in the sandbox with every symlink resolved, and its
// SHA-256 in lowercase hex.
type Resolver interface {
	Resolve(name, pathEnv, cwd string) (path, hash string, err error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(name, pathEnv, cwd string) (string, string, error)

func (f ResolverFunc) Resolve(name, pathEnv, cwd string) (string, string, error) {
	return f(name, pathEnv, cwd)
}

// ErrNotFound: no executable file of that name in PATH.
var ErrNotFound = errors.New("executable file not found in PATH")

// Resolution is what a name resolves to in one request's view of the
// sandbox.
type Resolution struct {
	Path, Hash string
	// Writable is true when the answer depends on a place whose contents
	// the sandbox makes rather than the read-only root (see ViewMounts):
	// the file is there, or the lookup went through there (a PATH entry
	// searched before the file, a symlink followed), so what the name
	// runs can change between the decision and the exec. Hash is empty
	// for a file in such a place: it would prove nothing.
	Writable bool
}

// A ViewResolver resolves in the view of one request, whose working
// directory (/work by default) is the host directory workspace (a session's), or a fresh empty tmpfs when
// workspace is empty. Root is one. The error comes with the Resolution
// so far: a name not found in a writable place is Writable too, since
// the sandbox may put it there.
type ViewResolver interface {
	ResolveIn(workspace, name, pathEnv, cwd string) (Resolution, error)
}

// ViewMounts are the places of every sandbox that are not its read-only
// root, in sandboxes whose working directory is DefaultCwd: the working
// directory (a session's workspace, else a fresh tmpfs) and /tmp are tmpfs
// the sandbox writes, /dev and /proc its own. Nothing below them is looked
// up on the host except a session's workspace; the rest is empty at
// decision time, and a lookup through any of them is Writable. A Root with
// another working directory has it in place of /work (Root.WithWorkDir).
var ViewMounts = []string{DefaultCwd, "/tmp", "/dev", "/proc"}

// Root resolves in a sandbox root laid out as jaild lays it: the directory
// Dir as "/", with host paths Binds (such as /usr) bound read-only at the
// same place. Symlinks are followed as the sandbox would follow them, in
// its own namespace, so a link never leads out of the root, and the file
// is opened beneath its mount with openat2 RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS, so a link swapped in meanwhile is refused rather
// than followed. Hashes are cached by the file's identity.
type Root struct {
	dir     string
	binds   []string // longest first
	workDir string   // the sandbox's working directory: views[0]
	views   []string // ViewMounts, with workDir for /work

	mu     sync.Mutex
	hashes map[fileKey]string
	cache  resolveCache // see resolvecache.go
	racy   time.Duration
}

// maxHashes bounds the hash cache: a root holds a few thousand programs.
const maxHashes = 8192

// NewRoot returns a Resolver over dir with binds, host paths that appear
// at the same place in the sandbox. NewRoot("/", nil) resolves on the host.
func NewRoot(dir string, binds ...string) *Root {
	bs := make([]string, 0, len(binds))
	for _, b := range binds {
		bs = append(bs, path.Clean("/"+b))
	}
	sort.Slice(bs, func(i, j int) bool { return len(bs[i]) > len(bs[j]) })
	return &Root{dir: dir, binds: bs, workDir: DefaultCwd, views: ViewMounts,
		hashes: make(map[fileKey]string), racy: racyWindow}
}

// WithWorkDir makes r resolve for sandboxes whose working directory (the
// default cwd, and where a session's workspace is seen) is the absolute
// path workDir instead of DefaultCwd; empty leaves DefaultCwd. It must be
// called before r is used, and returns r.
func (r *Root) WithWorkDir(workDir string) *Root {
	if workDir == "" {
		workDir = DefaultCwd
	}
	r.workDir = workDir
	r.views = append([]string{workDir}, ViewMounts[1:]...)
	return r
}

// WorkDir is the sandboxes' working directory r resolves for.
func (r *Root) WorkDir() string { return r.workDir }

// Resolve implements Resolver, in the view of a sandbox without a
// session: its working directory and /tmp are fresh and empty.
func (r *Root) Resolve(name, pathEnv, cwd string) (string, string, error) {
	res, err := r.ResolveIn("", name, pathEnv, cwd)
	return res.Path, res.Hash, err
}

// ResolveIn implements ViewResolver. Answers are cached for as long as
// nothing they depend on changes (see resolvecache.go); one that depends
// on a ViewMount is never cached.
func (r *Root) ResolveIn(workspace, name, pathEnv, cwd string) (Resolution, error) {
	return r.resolveCached(workspace, name, pathEnv, cwd, watched.current(), nil)
}

// resolveCached is ResolveIn with the watch's generation gen, read before
// anything else of the lookup, and the identities seen so far by the batch
// it is part of (nil: none, see batch). The workspace is not part of the
// key: an answer that looked at it is not cached.
func (r *Root) resolveCached(workspace, name, pathEnv, cwd string, gen uint64, seen *idSet) (Resolution, error) {
	k := resolveKey{name: name, pathEnv: pathEnv, cwd: cwd}
	if res := r.cache.get(k); res != nil {
		if res.fresh(gen) {
			return Resolution{Path: res.path, Hash: res.hash}, res.err
		}
		if res.recheck(gen, seen) {
			return Resolution{Path: res.path, Hash: res.hash}, res.err
		}
		r.cache.drop(k)
	}
	rec := newRecorder()
	p, h, err := r.resolve(workspace, name, pathEnv, cwd, rec)
	if rec.cacheable(time.Now(), r.racy) {
		res := &resolution{path: p, hash: h, err: err, deps: rec.deps}
		res.watched.Store(watched.add(rec.deps))
		res.checked.Store(gen) // stale if add watched anything new
		r.cache.put(k, res)
	}
	return Resolution{Path: p, Hash: h, Writable: rec.writable}, err
}

// resolve is ResolveIn without the cache; rec records what the answer
// depends on.
func (r *Root) resolve(workspace, name, pathEnv, cwd string, rec *recorder) (string, string, error) {
	if name == "" {
		return "", "", errors.New("empty command")
	}
	if cwd == "" {
		cwd = r.workDir
	}
	if strings.Contains(name, "/") {
		if !path.IsAbs(name) {
			name = path.Join(cwd, name)
		}
		return r.resolveFile(workspace, name, rec)
	}
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = cwd // an empty entry means the current directory
		} else if !path.IsAbs(dir) {
			dir = path.Join(cwd, dir)
		}
		p, h, err := r.resolveFile(workspace, path.Join(dir, name), rec)
		if err == nil {
			return p, h, nil
		}
	}
	return "", "", ErrNotFound
}

// resolveFile resolves the absolute sandbox path p to an executable
// regular file and hashes it (unless it is in a ViewMount).
func (r *Root) resolveFile(workspace, p string, rec *recorder) (string, string, error) {
	real, err := r.realpath(workspace, p, rec)
	if err != nil {
		return "", "", err
	}
	base, rel, view := r.host(workspace, real)
	if view {
		rec.view()
	}
	f, err := openBeneath(base, rel, view)
	if err != nil {
		rec.fail()
		return "", "", fmt.Errorf("open %s: %w", real, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		rec.fail()
		return "", "", fmt.Errorf("stat %s: %w", real, err)
	}
	rec.file(path.Join(base, rel), &st)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", "", fmt.Errorf("%s is not a regular file", real)
	}
	if st.Mode&0o111 == 0 {
		return "", "", fmt.Errorf("%s is not executable", real)
	}
	if view {
		return real, "", nil
	}
	h, err := r.hash(f, &st)
	if err != nil {
		rec.fail()
		return "", "", fmt.Errorf("hash %s: %w", real, err)
	}
	return real, h, nil
}

// realpath resolves every symlink and .. of the absolute sandbox path p in
// the sandbox's namespace: an absolute link target starts again at the
// sandbox's "/", and .. stops there. Below a ViewMount nothing is looked
// up on the host but the workspace, and there only beneath it, without
// following any symlink on the host's side (the sandbox wrote them).
func (r *Root) realpath(workspace, p string, rec *recorder) (string, error) {
	todo := strings.Split(p, "/")
	cur := "/"
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		base, rel, view := r.host(workspace, next)
		if view {
			rec.view()
		} else {
			rec.dir(r.hostPath(cur))
		}
		var st unix.Stat_t
		if err := lstat(base, rel, view, &st); err != nil {
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
				rec.fail()
			}
			return "", fmt.Errorf("%s: %w", next, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if len(todo) > 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return "", fmt.Errorf("%s: %w", next, unix.ENOTDIR)
			}
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: %w", p, unix.ELOOP)
		}
		target, err := readlink(base, rel, view)
		if err != nil {
			rec.fail()
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return cur, nil
}

// host maps a resolved sandbox path to the host: the directory it is
// mounted from, and its path below that. view is true below a ViewMount,
// whose base is the workspace for the working directory and empty (nothing
// there) for the others and for the working directory without a
// workspace.
func (r *Root) host(workspace, p string) (base, rel string, view bool) {
	for _, m := range r.views {
		if p == m || strings.HasPrefix(p, m+"/") {
			if m == r.workDir {
				base = workspace
			}
			return base, strings.TrimPrefix(strings.TrimPrefix(p, m), "/"), true
		}
	}
	for _, b := range r.binds {
		if p == b || strings.HasPrefix(p, b+"/") {
			return b, strings.TrimPrefix(strings.TrimPrefix(p, b), "/"), false
		}
	}
	return r.dir, strings.TrimPrefix(p, "/"), false
}

// viewResolve is how a lookup below a ViewMount is confined to it: no
// symlink (realpath follows the sandbox's links itself), no magic link, no
// other mount, nothing above it.
const viewResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// lstat is lstat(2) of base/rel; below a ViewMount, confined to base by
// openat2, and an empty mount (base "") holds nothing but itself.
func lstat(base, rel string, view bool, st *unix.Stat_t) error {
	if !view {
		return unix.Lstat(path.Join(base, rel), st)
	}
	if base == "" {
		if rel == "" {
			*st = unix.Stat_t{Mode: unix.S_IFDIR | 0o755}
			return nil
		}
		return unix.ENOENT
	}
	dfd, name, err := openParent(base, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if name == "" {
		return unix.Fstat(dfd, st)
	}
	return unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// readlink is readlink(2) of base/rel, confined as lstat's.
func readlink(base, rel string, view bool) (string, error) {
	if !view {
		return os.Readlink(path.Join(base, rel))
	}
	if base == "" {
		return "", unix.ENOENT
	}
	dfd, name, err := openParent(base, rel)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openParent opens the directory of base/rel beneath base (O_PATH) and
// returns it with the last name; "" names the directory itself.
func openParent(base, rel string) (int, string, error) {
	root, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	dir, name := path.Split(rel)
	if dir == "" {
		return root, name, nil
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: viewResolve})
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

// openBeneath opens base/rel for reading, refusing any symlink or ..
// below base: rel has just been resolved, so either means it changed.
// Below a ViewMount (view) it refuses other mounts too, and an empty
// mount holds nothing.
func openBeneath(base, rel string, view bool) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	if view && base == "" {
		return nil, unix.ENOENT
	}
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS)
	if view {
		resolve = viewResolve
	}
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: resolve,
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path.Join(base, rel)), nil
}

// fileKey identifies a file's content without reading it: a program
// rewritten in place changes its size, mtime or ctime, and one replaced
// is another inode.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func (r *Root) hash(f *os.File, st *unix.Stat_t) (string, error) {
	k := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	r.mu.Lock()
	h, ok := r.hashes[k]
	r.mu.Unlock()
	if ok {
		return h, nil
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", err
	}
	h = hex.EncodeToString(sum.Sum(nil))
	// A file written in the clock tick it was hashed in could change
	// again with the same key: only still files are cached.
	limit := unix.NsecToTimespec(time.Now().Add(-r.racy).UnixNano())
	if !before(st.Mtim, limit) || !before(st.Ctim, limit) {
		return h, nil
	}
	r.mu.Lock()
	if len(r.hashes) >= maxHashes {
		clear(r.hashes)
	}
	r.hashes[k] = h
	r.mu.Unlock()
	return h, nil
}
