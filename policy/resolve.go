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

// DefaultCwd is where a sandbox's command starts unless the request says.
const DefaultCwd = "/work"

// A Resolver finds the executable file name would run as in the sandbox:
// looked up in pathEnv (DefaultPath when empty) unless it holds a slash,
// relative to cwd (DefaultCwd when empty) if it is relative. It returns
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

// Root resolves in a sandbox root laid out as jaild lays it: the directory
// Dir as "/", with host paths Binds (such as /usr) bound read-only at the
// same place. Symlinks are followed as the sandbox would follow them, in
// its own namespace, so a link never leads out of the root, and the file
// is opened beneath its mount with openat2 RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS, so a link swapped in meanwhile is refused rather
// than followed. Hashes are cached by the file's identity.
type Root struct {
	dir   string
	binds []string // longest first

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
	return &Root{dir: dir, binds: bs, hashes: make(map[fileKey]string), racy: racyWindow}
}

// Resolve implements Resolver. Answers are cached for as long as nothing
// they depend on changes (see resolvecache.go).
func (r *Root) Resolve(name, pathEnv, cwd string) (string, string, error) {
	return r.resolveCached(name, pathEnv, cwd, nil)
}

// resolveCached is Resolve with the identities seen so far by the batch
// it is part of (nil: none, see batch).
func (r *Root) resolveCached(name, pathEnv, cwd string, seen map[string]statID) (string, string, error) {
	k := resolveKey{name: name, pathEnv: pathEnv, cwd: cwd}
	if res := r.cache.get(k); res != nil {
		if res.valid(seen) {
			return res.path, res.hash, res.err
		}
		r.cache.drop(k)
	}
	rec := newRecorder()
	p, h, err := r.resolve(name, pathEnv, cwd, rec)
	if rec.cacheable(time.Now(), r.racy) {
		r.cache.put(k, &resolution{path: p, hash: h, err: err, deps: rec.deps})
	}
	return p, h, err
}

// resolve is Resolve without the cache; rec records what the answer
// depends on.
func (r *Root) resolve(name, pathEnv, cwd string, rec *recorder) (string, string, error) {
	if name == "" {
		return "", "", errors.New("empty command")
	}
	if cwd == "" {
		cwd = DefaultCwd
	}
	if strings.Contains(name, "/") {
		if !path.IsAbs(name) {
			name = path.Join(cwd, name)
		}
		return r.resolveFile(name, rec)
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
		p, h, err := r.resolveFile(path.Join(dir, name), rec)
		if err == nil {
			return p, h, nil
		}
	}
	return "", "", ErrNotFound
}

// resolveFile resolves the absolute sandbox path p to an executable
// regular file and hashes it.
func (r *Root) resolveFile(p string, rec *recorder) (string, string, error) {
	real, err := r.realpath(p, rec)
	if err != nil {
		return "", "", err
	}
	base, rel := r.host(real)
	f, err := openBeneath(base, rel)
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
	h, err := r.hash(f, &st)
	if err != nil {
		rec.fail()
		return "", "", fmt.Errorf("hash %s: %w", real, err)
	}
	return real, h, nil
}

// realpath resolves every symlink and .. of the absolute sandbox path p in
// the sandbox's namespace: an absolute link target starts again at the
// sandbox's "/", and .. stops there.
func (r *Root) realpath(p string, rec *recorder) (string, error) {
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
		rec.dir(r.hostPath(cur))
		base, rel := r.host(next)
		var st unix.Stat_t
		if err := unix.Lstat(path.Join(base, rel), &st); err != nil {
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
		target, err := os.Readlink(path.Join(base, rel))
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
// mounted from, and its path below that.
func (r *Root) host(p string) (base, rel string) {
	for _, b := range r.binds {
		if p == b || strings.HasPrefix(p, b+"/") {
			return b, strings.TrimPrefix(strings.TrimPrefix(p, b), "/")
		}
	}
	return r.dir, strings.TrimPrefix(p, "/")
}

// openBeneath opens base/rel for reading, refusing any symlink or ..
// below base: rel has just been resolved, so either means it changed.
func openBeneath(base, rel string) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	dfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
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
