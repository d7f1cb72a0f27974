package policy

import (
	"path"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The resolution cache. Resolving a name walks PATH with an lstat per
// component of every candidate, then opens and fstats the file: about 20
// system calls for "date" and most of a decision's cost. A resolution
// depends only on the entries of the directories it looked in (a symlink
// cannot be retargeted, nor a file or directory replaced, without changing
// its parent's entries) and on the type and mode of the files it found. So
// the cache keeps, with each answer, those directories' and files'
// identities (dev, inode, mode, size, mtime, ctime), and a hit is one
// lstat of each (8 for "date") that must all match. Anything that would
// make the walk turn out differently changes one of them. While nothing
// they depend on changes, the watch (resolvewatch.go) spares even those
// lstats: one poll tells a decision that nothing changed.
//
// A timestamp is only as fine as the kernel's clock tick, so a change in
// the tick in which the cache read the directory could leave its mtime as
// it was. As git does with its index, nothing whose mtime or ctime is
// that recent ("racily clean") is cached: the answer is cached on a later
// lookup, once its inputs have been still for racyWindow.

// maxResolutions bounds the cache: the set of names a host's requests use
// is small; a flood of distinct names only empties it now and then.
const maxResolutions = 4096

// racyWindow is how old every mtime and ctime a resolution depends on must
// be for it to be cached; far more than any clock tick.
const racyWindow = 2 * time.Second

type resolveKey struct{ name, pathEnv, cwd string }

// resolution is one cached answer with what it depends on.
type resolution struct {
	path, hash string
	err        error
	deps       []dep
	// watched: the watch sees every change of deps. checked is the
	// watch's generation in which deps were last found as recorded.
	watched atomic.Bool
	checked atomic.Uint64
}

// fresh reports whether res holds without reading its deps: the watch
// has seen no change since they were last read. gen is the watch's
// generation, read before any of res's deps.
func (res *resolution) fresh(gen uint64) bool {
	return gen != 0 && res.checked.Load() == gen && res.watched.Load()
}

// dep is a host path and its identity when the resolution read it.
type dep struct {
	host string
	id   statID
}

type statID struct {
	dev, ino     uint64
	mode         uint32
	size         int64
	mtime, ctime unix.Timespec
}

func idOf(st *unix.Stat_t) statID {
	return statID{dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// recorder collects a resolution's deps as it runs. A nil recorder
// records nothing.
type recorder struct {
	deps     []dep
	seen     map[string]bool
	uncached bool // an outcome the deps do not determine (EACCES, EIO...)
	writable bool // a lookup below a ViewMount
}

func newRecorder() *recorder { return &recorder{seen: map[string]bool{}} }

// dir records the directory a lookup happens in.
func (rec *recorder) dir(host string) {
	if rec == nil || rec.seen[host] {
		return
	}
	rec.seen[host] = true
	var st unix.Stat_t
	if err := unix.Lstat(host, &st); err != nil {
		rec.uncached = true
		return
	}
	rec.deps = append(rec.deps, dep{host: host, id: idOf(&st)})
}

// file records a file whose type or mode decided the outcome.
func (rec *recorder) file(host string, st *unix.Stat_t) {
	if rec == nil || rec.seen[host] {
		return
	}
	rec.seen[host] = true
	rec.deps = append(rec.deps, dep{host: host, id: idOf(st)})
}

// view records a lookup below a ViewMount: the answer is Writable and
// depends on what the sandbox wrote, so it is not cached.
func (rec *recorder) view() {
	if rec != nil {
		rec.uncached, rec.writable = true, true
	}
}

func (rec *recorder) fail() {
	if rec != nil {
		rec.uncached = true
	}
}

// cacheable reports whether every dep has been still for window.
func (rec *recorder) cacheable(now time.Time, window time.Duration) bool {
	if rec.uncached {
		return false
	}
	limit := unix.NsecToTimespec(now.Add(-window).UnixNano())
	for _, d := range rec.deps {
		if !before(d.id.mtime, limit) || !before(d.id.ctime, limit) {
			return false
		}
	}
	return true
}

func before(a, b unix.Timespec) bool {
	return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec
}

// recheck reports whether every dep of res is as it was (valid), and if
// so trusts res for the generation gen, read before: the watch's
// generation moves on if it has to watch any of res's deps again (after
// its reset), so that res is read once more with its watches in place.
func (res *resolution) recheck(gen uint64, seen *idSet) bool {
	if !res.valid(seen) {
		return false
	}
	res.watched.Store(watched.add(res.deps))
	res.checked.Store(gen)
	return true
}

// valid reports whether every dep of res is as it was. seen, if not nil,
// holds the identities the same batch already read, and gets those this
// check reads: the commands of one decision share most of their deps (the
// PATH directories and their parents), which are then read once.
func (res *resolution) valid(seen *idSet) bool {
	var st unix.Stat_t
	for _, d := range res.deps {
		id, ok := seen.get(d.host)
		if !ok {
			if unix.Lstat(d.host, &st) != nil {
				return false
			}
			id = idOf(&st)
			seen.put(d.host, id)
		}
		if id != d.id {
			return false
		}
	}
	return true
}

// idSet is the identities a batch has read, by host path. A decision
// reads a dozen: a list searched in order costs less than a map's
// allocation and hashing.
type idSet struct{ deps []dep }

func (s *idSet) get(host string) (statID, bool) {
	if s != nil {
		for i := range s.deps {
			if s.deps[i].host == host {
				return s.deps[i].id, true
			}
		}
	}
	return statID{}, false
}

// put adds host's identity; a nil set keeps nothing.
func (s *idSet) put(host string, id statID) {
	if s != nil {
		s.deps = append(s.deps, dep{host: host, id: id})
	}
}

// batch returns a Resolver for the commands of one decision: r's, except
// that each path a cached answer depends on is read once for them all.
// The decision sees the tree as it was at one moment either way; it is
// not to be kept for later decisions.
// The watch's generation is read once for them all, first.
func (r *Root) batch() ViewResolver {
	b := &rootBatch{r: r, gen: watched.current()}
	b.seen.deps = b.buf[:0]
	return b
}

type rootBatch struct {
	r    *Root
	gen  uint64
	seen idSet
	buf  [16]dep // room for a decision's identities without growing
}

func (b *rootBatch) ResolveIn(workspace, name, pathEnv, cwd string) (Resolution, error) {
	return b.r.resolveCached(workspace, name, pathEnv, cwd, b.gen, &b.seen)
}

// batcher is a Resolver that can resolve the commands of one decision
// together (Root).
type batcher interface{ batch() ViewResolver }

// resolveCache maps (name, PATH, cwd) to a resolution of one Root.
type resolveCache struct {
	mu sync.Mutex
	m  map[resolveKey]*resolution
}

func (c *resolveCache) get(k resolveKey) *resolution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *resolveCache) put(k resolveKey, res *resolution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxResolutions {
		c.m = make(map[resolveKey]*resolution)
	}
	c.m[k] = res
}

func (c *resolveCache) drop(k resolveKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// hostPath is where the resolved sandbox path p, not below a ViewMount,
// is on the host.
func (r *Root) hostPath(p string) string {
	base, rel, _ := r.host("", p)
	return path.Join(base, rel)
}
