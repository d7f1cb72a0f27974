package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/fdstore"
	"golang.org/x/sys/unix"
)

// DefaultWorkspaceSize is the size of a workspace whose size is left zero.
const DefaultWorkspaceSize = 1 << 30

// minWorkspaceSize is one page: tmpfs rounds sizes up to whole pages.
const minWorkspaceSize = 4096

// A Workspace is what the sandboxes of one session share, while each of
// them is still a fresh sandbox: a /work that outlives them, a network
// namespace (loopback only) that a server started by one is reachable in
// from the next, and the host uid range their files are owned by.
//
// Every sandbox created on a workspace ([Workspace.Run], or a [Spec]
// whose Workspace is set) has its own pid, mount, IPC, UTS, user and cgroup
// namespaces, cgroup limits, seccomp filter, read-only root and fresh /tmp,
// exactly like any other; only /work, the network namespace and the uid
// range are shared. The uid range is shared because files a sandbox writes
// in /work are owned by its host uids: a next sandbox with another range
// would see them owned by nobody and could not change them. The sandboxes
// of a workspace are one trust domain (they share the files and the
// network anyway), and their separate pid and user namespaces keep one from
// signalling or tracing another even though their uids are equal.
//
// /work is a tmpfs of its own (nosuid and nodev, but not noexec: agents
// build and run programs there), bind-mounted into each sandbox: detached,
// mounted nowhere on the host and held by jaild, where the kernel allows
// it, else mounted under the workspace root (<root>/<id>, by default
// <state dir>/workspaces/<id>; see workspacemount.go and
// workspaceroot.go). The network namespace is held by jaild too, never
// mounted: a workspace adds nothing to the mount table that every new
// sandbox copies. It is made with the workspace's first sandbox (a
// proxied workspace's at once: its proxy listens in it). A dormant
// workspace (see [WithPrestart]) with no sandbox left drops its namespace,
// and its next sandbox gets a fresh one: with no sandbox on it, nothing
// listened or was connected in it. /work's size cap is enforced by the
// kernel (a write beyond it fails with ENOSPC); it is memory, counted
// against the memory cgroup of the sandbox that wrote the pages and, once
// that sandbox is gone, against the parent cgroup's budget.
//
// A workspace holds a uid slot for its life, whose record lists its live
// sandboxes: a jaild that dies leaves a record that any later sweep turns
// into the teardown of those sandboxes, the tmpfs and the network
// namespace. A workspace does not survive its jaild.
type Workspace struct {
	m   *Manager
	id  string
	dir string   // host path of the tmpfs (see Dir)
	mnt *os.File // the detached tmpfs; nil if mounted at dir, or stowed
	ns  *os.File // the network namespace; nil if stowed, not made yet, or dropped
	// mntN and nsN are mnt's and ns's numbers in the Manager's
	// descriptor store once stowed there (see stow), -1 otherwise. With
	// neither ns nor nsN, the workspace has no namespace (none before its
	// first sandbox, or one dropped while it was dormant: see
	// dropNetNSLocked), and add makes one.
	mntN, nsN int
	size      int64
	slot      *slot
	// proxied: made WithProxy, its sandboxes get the proxy variables.
	proxied bool
	pre     *prestarted // made WithPrestart; nil otherwise
	// dormant is set while pre keeps no sandbox started (see
	// prestarted.lower) and read by dropNetNSLocked under mu, which is
	// never taken under pre.mu.
	dormant atomic.Bool

	mu     sync.Mutex
	rec    record
	closed bool
	proxy  *net.TCPListener // the proxy listener, until taken
}

// workspacePaths derives a workspace's network namespace pin from its
// record, so that a sweep never removes a pin a record could name: only
// this one. Only a jaild from before workspaces held their namespace by
// descriptor made that pin; a sweep still removes it. The tmpfs path it derives is the default root's, which a
// record written before workspace roots implies (see
// recordedWorkspaceDir).
func workspacePaths(stateRoot, id string) (dir, netns string) {
	state := filepath.Dir(stateRoot)
	return filepath.Join(state, "workspaces", id), filepath.Join(state, "netns", id)
}

// WorkspaceOption changes how NewWorkspace makes a workspace.
type WorkspaceOption func(*workspaceOptions)

type workspaceOptions struct {
	proxy    bool
	prestart *box.Limits // WithPrestart (workspacewarm.go)
}

// WithProxy makes the workspace's network namespace with a proxy listener
// on 127.0.0.1:[ProxyPort], as a sandbox given [Egress] has: every sandbox
// on the workspace finds the proxy variables in its environment, and the
// caller serves a proxy on the listener it takes with
// [Workspace.TakeProxyListener] (a session's egress, decided once for the
// whole session).
func WithProxy() WorkspaceOption { return func(o *workspaceOptions) { o.proxy = true } }

// NewWorkspace makes a workspace whose /work holds at most size bytes (zero
// means DefaultWorkspaceSize). The caller must Close it, after destroying
// its sandboxes, and before closing m.
func (m *Manager) NewWorkspace(size int64, options ...WorkspaceOption) (_ *Workspace, retErr error) {
	var o workspaceOptions
	for _, opt := range options {
		opt(&o)
	}
	if size == 0 {
		size = DefaultWorkspaceSize
	}
	if size < minWorkspaceSize {
		return nil, invalid("workspace_bytes", "%d bytes: must be at least %d", size, minWorkspaceSize)
	}
	if o.prestart != nil {
		if err := o.prestart.Validate(); err != nil {
			return nil, err
		}
	}
	if err := m.addLive(); err != nil {
		return nil, err
	}
	// The workspace root first, so that nothing is recorded that a
	// failure here would leave. It is 0700: runc opens a bind mount's
	// source as host root, before the sandbox's user namespace exists
	// (TestWorkspacePersists fails if a runc ever stops doing so), so no
	// sandbox needs to traverse it.
	if !m.detached {
		if err := m.checkWorkspaceRoot(); err != nil {
			m.live.Done()
			return nil, err
		}
	}
	w, err := m.recordWorkspace(size)
	if err != nil {
		m.live.Done()
		return nil, err
	}
	defer func() {
		if retErr != nil {
			w.closed = true
			w.release(m.sweepWorkspace(&w.rec))
			w.closeFiles()
		}
	}()
	if err := w.mountWork(); err != nil {
		return nil, err
	}
	// Without a proxy, the network namespace comes with the first
	// sandbox (see add): making a workspace, a session's creation, does
	// not wait for the kernel's setup of a namespace (~0.6 ms of CPU),
	// which its first build pays instead.
	if o.proxy {
		if w.ns, w.proxy, err = newProxyNetNS(); err != nil {
			return nil, err
		}
		w.proxied = true
	}
	if err := w.stow(); err != nil {
		return nil, err
	}
	if o.prestart != nil {
		w.pre = newPrestarted(w, *o.prestart)
	}
	return w, nil
}

// stow moves what the workspace holds for its life (its slot's lock, its
// detached tmpfs and a proxied workspace's network namespace) into the
// Manager's descriptor store, out of the file table that every sandbox
// start copies (see package fdstore). Where there is no store, or the move
// fails, they stay in the process's table, as they work there too.
func (w *Workspace) stow() error {
	st := w.m.fdStore()
	if st == nil {
		return nil
	}
	fds := []int{int(w.slot.f.Fd())}
	if w.mnt != nil {
		fds = append(fds, int(w.mnt.Fd()))
	}
	if w.ns != nil {
		fds = append(fds, int(w.ns.Fd()))
	}
	got, err := st.Put(fds...)
	if err != nil {
		w.m.log.Warn("workspace keeps its descriptors in the process's table", "id", w.id, "err", err)
		return nil
	}
	w.slot.stow(st, got[0])
	if w.ns != nil {
		w.ns.Close()
		w.ns, w.nsN = nil, got[len(got)-1]
	}
	if w.mnt == nil {
		return nil
	}
	w.mnt.Close()
	w.mnt, w.mntN = nil, got[1]
	w.dir = st.Path(w.mntN) + "/."
	w.rec.Dir = w.dir
	return w.slot.rewrite(&w.rec)
}

// recordWorkspace returns a new workspace of size bytes holding a uid slot
// whose record names it. From then on a crash leaves that record, and the
// sweep removes what the record's paths hold.
func (m *Manager) recordWorkspace(size int64) (*Workspace, error) {
	id := uuid.NewString()
	w := &Workspace{m: m, id: id, size: size, mntN: -1, nsN: -1}
	w.rec = record{ID: id, StateRoot: m.containers, Owner: os.Getpid(), Workspace: true, Detached: m.detached}
	if !m.detached {
		// Reached by other processes through this one's root where it
		// has a mount namespace of its own (see privatemounts.go); the
		// record keeps the path a sweep, in whatever namespace, finds.
		w.rec.Dir = filepath.Join(m.workspaces, id)
		w.dir = m.ownRoot + w.rec.Dir
	}
	var err error
	if w.slot, err = acquireSlot(m.slotDir, &w.rec, m.sweepRecord); err != nil {
		return nil, err
	}
	return w, nil
}

// mountWork makes w's /work: a detached tmpfs held by w.mnt, or one
// mounted at w.rec.Dir in the workspace root.
func (w *Workspace) mountWork() error {
	opts := workspaceOpts(w.size, w.slot.hostID())
	if !w.m.detached {
		return mountTmpfs(w.rec.Dir, opts)
	}
	var err error
	if w.mnt, err = detachedWorkspace(opts); err != nil {
		return fmt.Errorf("mount workspace: %w", err)
	}
	// "/." makes a walk follow the fd's link, even one that
	// refuses to follow a last component that is a symlink.
	w.dir = procFD(w.mnt) + "/."
	// Where the workspace is reached while jaild lives, for
	// whoever reads the record (an operator, a test); a sweep
	// has nothing of it to remove.
	w.rec.Dir = w.dir
	return w.slot.rewrite(&w.rec)
}

// TakeProxyListener hands the proxy listener of a workspace made
// [WithProxy] to the caller, who serves it and closes it; nil if the
// workspace has none or it was taken. A listener never taken is closed by
// Close.
func (w *Workspace) TakeProxyListener() net.Listener {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proxy == nil {
		return nil
	}
	ln := w.proxy
	w.proxy = nil
	return ln
}

// ID names the workspace; a tmpfs mounted on the host is at <ID> in the
// workspace root (Dir).
func (w *Workspace) ID() string { return w.id }

// Size is the workspace's capacity in bytes.
func (w *Workspace) Size() int64 { return w.size }

// Dir is the host path of the workspace's tmpfs: <workspace root>/<ID>
// (/proc/<jaild's pid>/root/<workspace root>/<ID> where jaild has a mount
// namespace of its own, see Config.PrivateMounts), or, for a detached one,
// /proc/<jaild's pid>/task/<tid>/fd/<n>/. (the descriptor store's, see
// package fdstore) or /proc/<jaild's pid>/fd/<n>/., a path that every
// process of the host allowed to read jaild's descriptors (root) walks,
// while the workspace is open. Everything below it was written by
// sandboxed code: never resolve a path below it with ordinary
// path walks as root (a symlink would lead out of it); use openat2 with
// RESOLVE_IN_ROOT on a descriptor of Dir, or do the I/O in a sandbox.
func (w *Workspace) Dir() string { return w.dir }

// HostIDs are the host uid and gid of the sandbox user (uid and gid
// SandboxUID and SandboxGID inside) of every sandbox on the workspace: the
// owner of the files they write in /work. A front end that writes files
// into Dir on their behalf gives them these ids.
func (w *Workspace) HostIDs() (uid, gid int) {
	host := w.slot.hostID()
	return host + SandboxUID, host + SandboxGID
}

// Run runs spec in a fresh sandbox on the workspace, as [Manager.Run] does
// with spec.Workspace set to w (spec itself is left alone): the one started
// for it ahead of time if the workspace was made [WithPrestart] and that
// sandbox can serve spec.
func (w *Workspace) Run(ctx context.Context, spec *Spec) (*box.Result, error) {
	s := *spec
	s.Workspace = w
	if res, err, ok := w.runPrestarted(ctx, &s); ok {
		return res, err
	}
	return w.m.Run(ctx, &s)
}

// Used reports how many bytes of the workspace are in use.
func (w *Workspace) Used() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(w.dir, &st); err != nil {
		return 0, fmt.Errorf("workspace %s: %w", w.id, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// wsJoin is what a sandbox on a workspace joins: the paths its
// configuration names for the workspace's tmpfs and network namespace,
// through files that are the sandbox's own duplicates of the workspace's.
// The sandbox closes them once its init has joined both (or at its
// Destroy): a path through the number of a file of the workspace's own
// could name another file by then, had the workspace been closed
// meanwhile and the number reused.
type wsJoin struct {
	dir, netns string
	files      []*os.File
}

// close closes the files the paths go through.
func (j *wsJoin) close() {
	if j == nil {
		return
	}
	for _, f := range j.files {
		f.Close()
	}
	j.files = nil
}

// add records a sandbox that is about to be created on the workspace and
// returns the host uid its range starts at and what it joins.
func (w *Workspace) add(id string, g *cgroup.Group) (int, *wsJoin, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, nil, box.ErrClosed
	}
	// The path in this process's namespace, which the sandbox's is a
	// copy of (Dir may lead through /proc/<pid>/root, which a sandbox's
	// init may not walk, and which would name a mount of another
	// namespace).
	j := &wsJoin{dir: w.rec.Dir}
	if w.ns == nil && w.nsN < 0 {
		if err := w.makeNetNSLocked(); err != nil {
			return 0, nil, fmt.Errorf("workspace %s: %w", w.id, err)
		}
	}
	var err error
	if w.nsN >= 0 {
		err = j.openStored(w.m.fds, w.nsN, w.mntN)
	} else {
		err = j.dupFiles(w.ns, w.mnt)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("workspace %s: %w", w.id, err)
	}
	w.rec.Sandboxes = append(w.rec.Sandboxes, member{ID: id, Cgroup: g})
	if err := w.slot.rewrite(&w.rec); err != nil {
		w.rec.Sandboxes = w.rec.Sandboxes[:len(w.rec.Sandboxes)-1]
		j.close()
		return 0, nil, err
	}
	return w.slot.hostID(), j, nil
}

// dupFiles makes the join's own duplicates of the network namespace ns
// and, unless nil, the tmpfs mnt in the process's table, and the paths
// through them.
func (j *wsJoin) dupFiles(ns, mnt *os.File) error {
	for _, f := range []*os.File{ns, mnt} {
		if f == nil {
			continue
		}
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			j.close()
			return err
		}
		j.files = append(j.files, os.NewFile(uintptr(fd), f.Name()))
	}
	j.netns = procFD(j.files[0])
	if len(j.files) > 1 {
		j.dir = procFD(j.files[1])
	}
	return nil
}

// openStored opens the join's own files on the stowed network namespace
// ns and, unless negative, tmpfs mnt in the store st (the same files, as
// the store checks), and makes the paths through them. The workspace is
// open, so the numbers hold its files: they are closed only once it is
// closed.
func (j *wsJoin) openStored(st *fdstore.Store, ns, mnt int) error {
	f, err := st.Open(ns, unix.O_RDONLY)
	if err != nil {
		return err
	}
	j.files = append(j.files, f)
	j.netns = procFD(f)
	if mnt < 0 {
		return nil
	}
	if f, err = st.Open(mnt, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		j.close()
		return err
	}
	j.files = append(j.files, f)
	j.dir = procFD(f)
	return nil
}

// remove forgets a sandbox that was destroyed; the last one of a dormant
// workspace takes the network namespace with it (see dropNetNSLocked).
func (w *Workspace) remove(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.rec.Sandboxes = slices.DeleteFunc(w.rec.Sandboxes, func(s member) bool { return s.ID == id })
	if err := w.slot.rewrite(&w.rec); err != nil {
		// The record names a sandbox that is gone: a sweep would find
		// nothing to destroy for it, which is harmless.
		w.m.log.Warn("rewriting workspace record", "id", w.id, "err", err)
	}
	w.dropNetNSLocked()
}

// dropNetNS drops the network namespace of a dormant workspace that has
// no sandbox (see dropNetNSLocked).
func (w *Workspace) dropNetNS() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropNetNSLocked()
}

// dropNetNSLocked closes the workspace's network namespace if the
// workspace is dormant (see prestarted.lower) and no sandbox is on it: a
// namespace is ~90 KiB of kernel memory, the biggest part of an idle
// session's cost, and every namespace's end walks every live one. With no
// sandbox on it, nothing listens or is connected in it, so nothing is lost:
// add makes another (loopback up) for the next sandbox. A sandbox the
// dormancy does not count (one the waiting sandbox could not serve) keeps
// it, as does a proxied workspace, whose proxy listens in it. w.mu is held.
func (w *Workspace) dropNetNSLocked() {
	if w.closed || w.proxied || !w.dormant.Load() || len(w.rec.Sandboxes) > 0 {
		return
	}
	if w.ns != nil {
		w.ns.Close()
		w.ns = nil
	}
	if w.nsN >= 0 {
		if err := w.m.fds.Close(w.nsN); err != nil {
			// Still held: it is closed with the store.
			w.m.log.Warn("closing a dormant workspace's network namespace", "id", w.id, "err", err)
		}
		w.nsN = -1
	}
}

// makeNetNSLocked gives the workspace a network namespace, for its first
// sandbox or the first after dropNetNSLocked, in the descriptor store if
// the Manager has one. w.mu is held.
func (w *Workspace) makeNetNSLocked() error {
	ns, err := newNetNS(nil)
	if err != nil {
		return err
	}
	st := w.m.fdStore()
	if st == nil {
		w.ns = ns
		return nil
	}
	got, err := st.Put(int(ns.Fd()))
	if err != nil {
		w.m.log.Warn("workspace keeps its network namespace in the process's table", "id", w.id, "err", err)
		w.ns = ns
		return nil
	}
	ns.Close()
	w.nsN = got[0]
	return nil
}

// Close destroys what is left of the workspace's sandboxes, unmounts and
// removes its tmpfs (without reading it: nothing in it is followed),
// closes its network namespace, and frees its uid range. It is safe to call more
// than once. If a step fails, the record is kept for the next sweep.
func (w *Workspace) Close() error {
	if w.pre != nil {
		// Its sandboxes leave the record before it is swept.
		w.pre.close()
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.proxy != nil {
		w.proxy.Close()
		w.proxy = nil
	}
	w.mu.Unlock()
	err := w.m.sweepWorkspace(&w.rec)
	w.release(err)
	// Closed after the sandboxes: a sandbox that could not be
	// destroyed holds binds and namespaces of its own.
	w.closeFiles()
	if err != nil {
		return fmt.Errorf("close workspace %s: %w", w.id, err)
	}
	return nil
}

// closeFiles closes the tmpfs and the network namespace jaild holds. w is
// closed: add duplicates them no more.
func (w *Workspace) closeFiles() {
	for _, f := range []*os.File{w.mnt, w.ns} {
		if f != nil {
			f.Close()
		}
	}
	if w.nsN >= 0 {
		if err := w.m.fds.Close(w.mntN, w.nsN); err != nil {
			w.m.log.Warn("closing workspace descriptors", "id", w.id, "err", err)
		}
		w.mntN, w.nsN = -1, -1
	}
}

// release gives the slot back, or, after a failed teardown, keeps its
// record for the next sweep; either way the Manager no longer waits for w.
func (w *Workspace) release(teardown error) {
	if teardown != nil {
		w.m.log.Warn("tearing down workspace", "id", w.id, "err", teardown)
		w.slot.keep()
	} else {
		w.slot.release()
	}
	w.m.live.Done()
}

// sweepWorkspace tears down what a workspace record describes: its
// sandboxes first (they may still run with its uid range and hold its
// mounts), then its tmpfs, unless detached (nothing of it is on the host),
// and an older jaild's network namespace pin.
func (m *Manager) sweepWorkspace(rec *record) error {
	if rec.ID == "" || filepath.Base(rec.ID) != rec.ID || rec.ID == "." || rec.ID == ".." {
		return fmt.Errorf("workspace record with a bad id %q", rec.ID)
	}
	var errs []error
	for _, s := range rec.Sandboxes {
		if err := m.sweepRecord(&record{ID: s.ID, StateRoot: rec.StateRoot, Cgroup: s.Cgroup, Owner: rec.Owner}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// A sandbox that may still run keeps the mounts: the next
		// sweep tries again.
		return errors.Join(errs...)
	}
	_, netns := workspacePaths(rec.StateRoot, rec.ID)
	if rec.Detached {
		return removeNetNS(netns)
	}
	// The tmpfs is unmounted before its mount point is removed, with
	// rmdir: its contents, which sandboxes wrote, are never walked. Only
	// a workspace tmpfs is unmounted (see workspaceroot.go).
	dir, err := recordedWorkspaceDir(rec)
	if err == nil {
		_, err = workspaceMount(dir)
	}
	if err == nil {
		err = unmountAndRemove(dir, unix.Rmdir)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if err := removeNetNS(netns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
