package policy

import (
	"path"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The watch over what cached resolutions depend on. Checking a cached
// answer by an lstat of each path it depends on costs a decision about
// ten system calls; the watch makes it one poll.
//
// Every path a cached answer depends on is watched with inotify, and so is
// each of its ancestors up to "/" (for the one entry of each that leads
// down). The kernel queues an event before the system call that makes a
// change returns, for every change of a watched directory's entries and
// of a watched file's or directory's attributes or contents: whatever
// changes a dep's identity (statID) or what its path names queues one.
// Inotify does not see a mount over a path, so the mount table is watched
// too, by polling /proc/self/mounts, which reports any change of this
// mount namespace's table (propagated mounts included). One poll of both
// descriptors is then a decision's check.
//
// The watch counts generations. An event about a watched path, the queue's
// overflow, a change of the mount table, a new watch, and any failure
// start a new one. A cached answer is trusted without an lstat only in the
// generation it was last checked by lstat in (its deps' watches were all in
// place before that generation began, or it would have ended); otherwise
// it is checked by lstat as before, and then trusted until the next. Each
// such check asks for its paths' watches again: a path renamed over names
// another inode than the one watched first, and is watched anew.
// Paths the watch cannot follow (a filesystem whose changes inotify may
// miss, such as a network one; a symlink among the ancestors; a failed
// inotify_add_watch) leave their answers checked by lstat every time.

// watchMask is the events of a watched path: its entries' and its own.
// A write through a shared mapping queues no event (though it changes
// the file's mtime, which an lstat would see): IN_CLOSE_WRITE sees its
// writer close the file, if after the write. What the cache depends on is
// root's to write (the sandboxes' root, the host's bound directories),
// whose tools write() or write a new file and rename it.
const watchMask = unix.IN_ATTRIB | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DONT_FOLLOW

// maxWatches bounds the watched paths; past it the watch starts over.
const maxWatches = 4096

// watcher is one process's watch: answers of every Root share it, as they
// share the kernel's limit on inotify instances.
type watcher struct {
	mu     sync.Mutex
	ifd    int // inotify, nonblocking; -1 until the first watch
	mfd    int // /proc/self/mounts; -1 until the first watch
	gen    uint64
	byPath map[string]*watch
	byWD   map[int32][]*watch
	buf    [4096]byte
}

// watch is one watched path. Inotify watches inodes: paths that name the
// same inode share a descriptor.
type watch struct {
	wd   int32
	path string
	dep  bool            // a dep: every event in it counts
	next map[string]bool // an ancestor: events about these entries count
	ok   bool            // its changes are all seen (see watchable)
}

var watched = &watcher{ifd: -1, mfd: -1, gen: 1}

// current returns the generation after reading what the kernel queued
// since the last call; 0 if nothing is watched (no answer can be trusted).
func (w *watcher) current() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ifd < 0 {
		return 0
	}
	fds := []unix.PollFd{{Fd: int32(w.ifd), Events: unix.POLLIN}, {Fd: int32(w.mfd), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	switch {
	case err != nil:
		w.reset()
		return 0
	case n == 0:
		return w.gen
	}
	if fds[1].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
		w.gen++
	}
	if fds[0].Revents != 0 && !w.drain() {
		w.reset()
		return 0
	}
	return w.gen
}

// drain reads the queued events; false on an overflow or a failure.
func (w *watcher) drain() bool {
	for {
		n, err := unix.Read(w.ifd, w.buf[:])
		if err == unix.EAGAIN {
			return true
		}
		if err != nil || n <= 0 {
			return false
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				return false
			}
			w.event(ev.Wd, ev.Mask, unix.ByteSliceToString(name))
		}
	}
}

// event starts a new generation if the event concerns a watched path.
func (w *watcher) event(wd int32, mask uint32, name string) {
	ws := w.byWD[wd]
	for _, x := range ws {
		if x.dep || name == "" || x.next[name] {
			w.gen++
			break
		}
	}
	if mask&unix.IN_IGNORED != 0 { // the inode is gone, or its filesystem
		for _, x := range ws {
			delete(w.byPath, x.path)
		}
		delete(w.byWD, wd)
	}
}

// add watches deps' paths and their ancestors. It reports whether every
// one of them is watched so that its changes are seen; if not, answers
// that depend on them are never trusted without an lstat.
func (w *watcher) add(deps []dep) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ifd < 0 && !w.open() {
		return false
	}
	all := true
	for _, d := range deps {
		if !path.IsAbs(d.host) { // its ancestors above the cwd go unwatched
			all = false
			continue
		}
		if !w.watchPath(d.host, true, "") {
			all = false
		}
		for p := d.host; p != "/"; {
			name := path.Base(p)
			p = path.Dir(p)
			if !w.watchPath(p, false, name) {
				all = false
			}
		}
	}
	if len(w.byPath) > maxWatches {
		w.reset()
		return false
	}
	return all
}

// watchPath watches p as a dep, or as the ancestor of a watched path
// through its entry next. A new watch, or one that now counts more of its
// events, starts a new generation.
//
// The watch is asked for again even if p has one: inotify watches the
// inode p names now (returning the descriptor it already has, if it is
// watched), and p may name another inode than when it was first watched
// (a directory renamed over it; the old one, still watched, may live on
// elsewhere).
func (w *watcher) watchPath(p string, dep bool, next string) bool {
	wd, err := unix.InotifyAddWatch(w.ifd, p, watchMask)
	if err != nil {
		return false
	}
	x := w.byPath[p]
	if x != nil && x.wd != int32(wd) {
		w.unwatch(x)
		x = nil
	}
	if x == nil {
		x = &watch{wd: int32(wd), path: p, next: map[string]bool{}, ok: watchable(p, dep)}
		w.byPath[p] = x
		w.byWD[x.wd] = append(w.byWD[x.wd], x)
		w.gen++
	}
	if dep && !x.dep {
		x.dep = true
		w.gen++
	}
	if next != "" && !x.next[next] {
		x.next[next] = true
		w.gen++
	}
	return x.ok
}

// unwatch forgets x, whose path names another inode now, and removes its
// inode's watch if no other path names it.
func (w *watcher) unwatch(x *watch) {
	delete(w.byPath, x.path)
	ws := w.byWD[x.wd][:0]
	for _, y := range w.byWD[x.wd] {
		if y != x {
			ws = append(ws, y)
		}
	}
	if len(ws) > 0 {
		w.byWD[x.wd] = ws
		return
	}
	delete(w.byWD, x.wd)
	_, _ = unix.InotifyRmWatch(w.ifd, uint32(x.wd))
}

// watchable reports whether inotify sees every change of p: p is on a
// local filesystem, and an ancestor is no symlink (its target's directory
// is not watched; a dep that is a symlink is the link itself, whose
// directory is).
func watchable(p string, dep bool) bool {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil || !dep && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	var fs unix.Statfs_t
	if unix.Statfs(p, &fs) != nil {
		return false
	}
	switch uint32(fs.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.F2FS_SUPER_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.SQUASHFS_MAGIC, unix.RAMFS_MAGIC:
		return true
	}
	return false
}

// open starts watching: an inotify instance and the mount table.
func (w *watcher) open() bool {
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return false
	}
	mfd, err := unix.Open("/proc/self/mounts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(ifd)
		return false
	}
	w.ifd, w.mfd = ifd, mfd
	w.byPath = make(map[string]*watch)
	w.byWD = make(map[int32][]*watch)
	return true
}

// reset drops every watch, and with them the trust of every answer; the
// next add starts over.
func (w *watcher) reset() {
	if w.ifd >= 0 {
		unix.Close(w.ifd)
		unix.Close(w.mfd)
	}
	w.ifd, w.mfd = -1, -1
	w.byPath, w.byWD = nil, nil
	w.gen++
}
