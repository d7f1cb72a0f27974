package jail

import (
	"context"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
)

// Test hooks for the external tests.

var NewEgressNetNS = newEgressNetNS

func EgressNetNS(m *Manager, id string) string { return egressNetNS(m.containers, id) }

// SetTeardownHook makes m's background teardowns call f with the sandbox's
// id before they destroy it (nil: no hook). Set it before any run.
func SetTeardownHook(m *Manager, f func(id string)) { m.teardowns.hook = f }

// SetHandoverHook makes m call f once a waiting sandbox's command is
// handed over, before the rest of its pins are taken (nil: no hook). Set it
// before any run.
func SetHandoverHook(m *Manager, f func()) { m.handoverHook = f }

// SetLimitsHook makes every setting of a started sandbox's limits on m
// call f first and fail with its error (nil: no hook). Set it before any
// run.
func SetLimitsHook(m *Manager, f func() error) { m.limitsHook = f }

// RunKept runs cmd in a fresh sandbox with default limits and returns the
// sandbox's Destroy instead of calling it, for BenchmarkDestroy.
func RunKept(m *Manager, cmd *box.Command) (destroy func() error, err error) {
	sb, err := m.create(context.Background(), box.Limits{}, nil, false, false)
	if err != nil {
		return nil, err
	}
	if _, err := sb.Run(context.Background(), cmd); err != nil {
		_ = sb.Destroy()
		return nil, err
	}
	return sb.Destroy, nil
}

// Warm is a pooled sandbox started apart from any pool, for
// BenchmarkPoolHandover.
type Warm struct {
	p *Pool
	w *warm
}

// Prestart starts a pooled sandbox with default limits on m.
func Prestart(m *Manager) (*Warm, error) {
	p := &Pool{m: m, limits: box.Limits{}.WithDefaults()}
	w, err := p.prestart()
	if err != nil {
		return nil, err
	}
	return &Warm{p: p, w: w}, nil
}

// Handover hands cmd to the waiting sandbox and collects the result.
func (w *Warm) Handover(cmd *box.Command) (*box.Result, error) {
	return w.w.runCommand(context.Background(), cmd, nil)
}

// Destroy destroys the sandbox.
func (w *Warm) Destroy() error { return w.w.sb.Destroy() }

// PrestartCounts reports how many sandboxes a workspace made WithPrestart
// has ready and how many it keeps.
func PrestartCounts(w *Workspace) (ready, want int) {
	w.pre.mu.Lock()
	defer w.pre.mu.Unlock()
	return len(w.pre.ready), w.pre.want
}

// PrestartKept counts the sandboxes w's list of ready ones still points
// to beyond its length: taken or destroyed, and kept from the garbage
// collector.
func PrestartKept(w *Workspace) int {
	w.pre.mu.Lock()
	defer w.pre.mu.Unlock()
	n := 0
	for _, x := range w.pre.ready[len(w.pre.ready):cap(w.pre.ready)] {
		if x != nil {
			n++
		}
	}
	return n
}

// HotWindow is how long a hot workspace keeps its extra sandboxes.
const HotWindow = hotWindow

// DetachedWorkspaces reports whether m's workspaces are detached mounts.
func DetachedWorkspaces(m *Manager) bool { return m.detached }

// IdleWorkspaceFDs bounds the descriptors of an idle workspace with a
// waiting sandbox.
const IdleWorkspaceFDs = idleWorkspaceFDs

// DetachedMountsWork reports whether this kernel lets workspaces be
// detached mounts.
var DetachedMountsWork = detachedMountsWork

// PoolBuilding is how many sandboxes are being started for p. Ready plus
// building never exceeds the pool's size.
func PoolBuilding(p *Pool) int { return int(p.building.Load()) }

// TearingDown is how many sandboxes m is destroying after their runs
// returned.
func TearingDown(m *Manager) int { return len(m.teardowns.slots) }

// PrestartStats reports how many runs a prestarted sandbox of w served
// (hits) and how many it could serve found none ready (misses); zero for a
// workspace made without WithPrestart.
func PrestartStats(w *Workspace) (hits, misses int64) {
	if w.pre == nil {
		return 0, 0
	}
	return w.pre.hits.Load(), w.pre.misses.Load()
}

// SharedDev reports whether m's sandboxes share a /dev (see devdir.go).
func SharedDev(m *Manager) bool { return m.dev != nil }

// UnshareDev makes m's sandboxes make their own /dev, as on a kernel
// without detached mounts, and reports whether they shared one before.
func UnshareDev(m *Manager) bool {
	shared := m.dev != nil
	m.closeDev()
	return shared
}

// DormantWorkspaceFDs bounds the descriptors of a dormant workspace in
// the process's file table.
const DormantWorkspaceFDs = dormantWorkspaceFDs

// StoredWorkspaceFDs is how many descriptors a workspace keeps in its
// Manager's descriptor store once it has had a sandbox (its network
// namespace comes with the first): its tmpfs's only if detached (otherwise
// the tmpfs is mounted in the workspace root).
func StoredWorkspaceFDs(detached bool) int {
	if detached {
		return storedWorkspaceFDs
	}
	return storedWorkspaceFDs - 1
}

// NoFDStore makes m's workspaces hold their descriptors in the process's
// file table, as when the store cannot start. Call it before the first
// workspace.
func NoFDStore(m *Manager) { m.fdsOnce.Do(func() {}) }

// StoreFDs counts the descriptors in m's descriptor store, its own socket
// left out; -1 if m has no store.
func StoreFDs(m *Manager) int {
	if m.fds == nil {
		return -1
	}
	ents, err := os.ReadDir(filepath.Dir(m.fds.Path(0)))
	if err != nil {
		return -1
	}
	return len(ents) - 1
}

// SetPrestartHook makes every build of a workspace's prestarted sandbox on
// m call f first, once the prestart gate let it by (nil: no hook). Set it
// before any workspace is made.
func SetPrestartHook(m *Manager, f func()) { m.prestartHook = func(*Workspace) { f() } }

// SetPrestartWorkspaceHook is SetPrestartHook with the build's workspace.
func SetPrestartWorkspaceHook(m *Manager, f func(*Workspace)) { m.prestartHook = f }

// PrestartWaiting reports the ids and init pids of the sandboxes ready on a
// workspace made WithPrestart.
func PrestartWaiting(w *Workspace) (ids []string, pids []int) {
	w.pre.mu.Lock()
	defer w.pre.mu.Unlock()
	for _, r := range w.pre.ready {
		ids = append(ids, r.sb.id)
		pid, _ := r.sb.init.p.Pid()
		pids = append(pids, pid)
	}
	return ids, pids
}

// PrestartState reports how many sandboxes are being built for a workspace
// made WithPrestart, and whether it is closing.
func PrestartState(w *Workspace) (building int, closed bool) {
	w.pre.mu.Lock()
	defer w.pre.mu.Unlock()
	return w.pre.building, w.pre.closed
}

// SkipFilterProbe makes m's waiting sandboxes keep the seccomp profile in
// libcontainer's config, as where the probe fails. Set it before any run.
func SkipFilterProbe(m *Manager) { m.noFilterProbe = true }

// SetFilterFrameHook makes the inits of m's waiting sandboxes read
// f(frame) in place of their filter's frame. Set it before any run.
func SetFilterFrameHook(m *Manager, f func(frame []byte) []byte) { m.filterFrameHook = f }

// WaitingFilter reports whether m's waiting sandboxes load their filter
// themselves (the probe worked).
func WaitingFilter(m *Manager) bool { return m.waitingFilter() != nil }

// ReadFilter reads the newest seccomp filter of thread tid, which must be
// asleep (in a read, say), and its flags.
func ReadFilter(tid int) ([]unix.SockFilter, uint32, error) {
	p, err := readFilter(tid)
	if err != nil {
		return nil, 0, err
	}
	return p.insns, p.flags, nil
}

// RunMiss runs spec on p as a run that finds no sandbox ready does: on one
// built for it (p's Manager must have probed its filter).
func RunMiss(p *Pool, ctx context.Context, spec *Spec) (*box.Result, error) {
	if p.m.waitingFilter() == nil {
		panic("RunMiss: no waiting filter")
	}
	return p.runBuilt(ctx, spec)
}

// MountDestinations are where a sandbox of m with default limits mounts
// something, as its libcontainer config lists them.
func MountDestinations(m *Manager) []string {
	var ds []string
	ms := m.mounts(64<<20, "", "")
	if m.roots != nil {
		_, ms = m.roots.split(ms, m.dev != nil)
	}
	for _, mnt := range ms {
		ds = append(ds, mnt.Destination)
	}
	return ds
}

// BindAndRefresh binds src at dst as a Manager with private mounts binds
// its template's host paths, runs replace, then refreshes the bind as each
// new sandbox does; unmount detaches it all.
func BindAndRefresh(src, dst string, replace func()) (unmount func() error, err error) {
	b, err := bindReadOnly(src, dst, false)
	if err != nil {
		return nil, err
	}
	t := &templateBinds{srcs: []string{src}, binds: []templateBind{b}, log: func(string, ...any) {}}
	replace()
	return t.unmount, t.refresh()
}

// SetAttachedOnly makes the Managers made from now on behave as on a
// kernel without detached mounts (on) or as this one (off).
func SetAttachedOnly(on bool) { attachedOnly = on }

// WorkspaceHoldsNetNS reports whether w holds its network namespace (a
// dormant workspace with no sandbox drops it).
func WorkspaceHoldsNetNS(w *Workspace) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ns != nil || w.nsN >= 0
}
