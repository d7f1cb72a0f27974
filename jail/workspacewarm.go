package jail

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
)

// WithPrestart makes the workspace keep one sandbox with limits l started
// on it for its next run, as a [Pool] keeps sandboxes for runs of their
// own: made with the workspace, and again as soon as a run takes it. It
// waits in the same "pool-wait" init, with the workspace's uid range,
// network namespace, /work and proxy variables, so that a run on the
// workspace ([Workspace.Run]) does not wait for a sandbox to be built.
//
// It is still one fresh sandbox per run: the waiting one is used by a
// single run and destroyed after it, like any other, with the same
// namespaces, seccomp filter, read-only root and limits. A run it cannot
// serve goes to a fresh sandbox, as without the option: another tmpfs size
// than l's, egress of its own, extra files other than the write end of one
// pipe, or a working directory that the waiting init (already the sandbox
// user) cannot enter. Other memory, pids and CPU limits are set on its
// cgroup before the command is released. The waiting sandbox costs a
// process (one of the budget's pids), a cgroup and a few pages of memory
// while the workspace is idle; Close destroys it, and the workspace's slot
// record lists it, so the sweep after a crash removes it too.
//
// A workspace with no run for the Manager's Config.PrestartIdle goes
// dormant: it destroys its waiting sandboxes and keeps none, so that an
// idle workspace holds no process and no cgroup, only its tmpfs; once no
// sandbox is left on it, it drops its network namespace too (unless
// proxied), and the next sandbox gets a fresh one. Every live process,
// cgroup and namespace slows the start or end of every other sandbox (the
// kernel walks them), so a host with many idle workspaces builds faster
// with them dormant. The next run on a dormant workspace builds a fresh
// sandbox, and the workspace wakes: it starts one again for the run
// after.
func WithPrestart(l box.Limits) WorkspaceOption {
	return func(o *workspaceOptions) { o.prestart = &l }
}

// DefaultPrestartIdle is Config.PrestartIdle's default.
const DefaultPrestartIdle = time.Minute

// Prestart counts: an idle workspace keeps one sandbox started; one whose
// runs come back to back or at once keeps up to hotPrestart, until it has
// been idle for hotWindow; a dormant one keeps none.
const (
	hotPrestart = 4
	hotWindow   = 2 * time.Second
)

// Descriptors of a workspace made WithPrestart. Its slot lock, tmpfs and
// network namespace (storedWorkspaceFDs; the namespace from its first
// sandbox on, and not while it is dormant with none: see makeNetNSLocked
// and dropNetNSLocked) are in the Manager's descriptor store
// (see package fdstore), out of the file table that every sandbox start
// copies; in that table, a dormant workspace holds none
// (dormantWorkspaceFDs) and an idle one its waiting sandbox's (idleFDs).
const (
	storedWorkspaceFDs  = 3
	dormantWorkspaceFDs = 0
	idleWorkspaceFDs    = dormantWorkspaceFDs + idleFDs
)

// prestarted keeps a workspace's next sandboxes started: one while the
// workspace is idle, more while its runs come faster than one sandbox is
// built (see take), none once it has been idle for idle (dormant).
type prestarted struct {
	w      *Workspace
	limits box.Limits
	idle   time.Duration // 0: never dormant

	mu       sync.Mutex
	ready    []*warm
	building int           // builds under way, or queued at the prestart gate
	built    chan struct{} // closed (and replaced) when a build ends
	// hurry holds a token for each run waiting for a build: each lets
	// one of the workspace's builds queued at the Manager's prestart
	// gate through (see prestartgate.go). stop is closed by close: a
	// queued build is not made.
	hurry, stop chan struct{}
	waiting     int // runs in take waiting for a build
	want        int // sandboxes to keep: hotPrestart while hot, 1, 0 while dormant
	lastTake    time.Time
	active      int // runs between take and done
	// held: a run that ended beside others held its replacement back
	// (see replace); the last run's done starts it.
	held bool
	// idleSince is when the workspace last ran nothing and had a
	// sandbox ready: its start, a run's end, or a build's.
	idleSince time.Time
	timer     *time.Timer // lowers want (see lower); nil until armed
	closed    bool
	wg        sync.WaitGroup // builds and teardowns

	hits, misses atomic.Int64
}

func newPrestarted(w *Workspace, l box.Limits) *prestarted {
	p := &prestarted{
		w: w, limits: l.WithDefaults(), idle: w.m.prestartIdle, want: 1,
		built: make(chan struct{}), hurry: make(chan struct{}, hotPrestart), stop: make(chan struct{}),
	}
	p.mu.Lock()
	p.idleSince = time.Now()
	p.startLocked()
	p.armLocked()
	p.mu.Unlock()
	return p
}

// startLocked starts the builds that bring the ready and building
// sandboxes up to want. p.mu is held.
func (p *prestarted) startLocked() {
	for !p.closed && len(p.ready)+p.building < p.want {
		p.building++
		p.wg.Add(1)
		go p.build()
	}
}

// build builds one sandbox, once the Manager's prestart gate lets it
// through, and makes it ready.
func (p *prestarted) build() {
	defer p.wg.Done()
	leave, ok := p.w.m.prestartGate.enter(p.hurry, p.stop)
	if ok {
		// Closed, cooled down or gone dormant while it waited: the
		// sandboxes ready and the other builds are enough.
		p.mu.Lock()
		ok = !p.closed && len(p.ready)+p.building <= p.want
		p.mu.Unlock()
	}
	var (
		w   *warm
		err error
	)
	if ok {
		if h := p.w.m.prestartHook; h != nil {
			h(p.w)
		}
		w, err = p.w.m.startWaiting(context.Background(), p.limits, p.w, true)
	}
	leave()
	p.mu.Lock()
	p.building--
	close(p.built)
	p.built = make(chan struct{})
	switch {
	case !ok:
		p.mu.Unlock()
		return
	case err != nil:
		p.mu.Unlock()
		// The next run starts another attempt: a broken host is not
		// hammered, one build per run at most.
		p.w.m.log.Warn("prestarting a workspace sandbox", "workspace", p.w.id, "err", err)
		return
	case p.closed || len(p.ready) >= p.want:
		// Closed, or cooled down or gone dormant while it was built.
		p.mu.Unlock()
		w.destroy()
		return
	}
	p.ready = append(p.ready, w)
	// It waits idle for at least p.idle: one built late is not
	// destroyed as soon as it is ready.
	p.idleSince = time.Now()
	p.mu.Unlock()
}

// take hands out a waiting sandbox; the caller starts building the next
// (replace) once its run ends, see replaceLater. If none is ready but one is
// being built, it waits for that one: never longer than building a fresh
// one would take, and a run whose caller gives up meanwhile still gets its
// sandbox, killed at once, and a Canceled result, as a fresh one's would
// be. nil: none; the next is being built, unless woke.
//
// A run that finds none ready, or comes within hotWindow of the previous
// one while another is still being built, makes the workspace hot: it
// keeps hotPrestart sandboxes until it has been idle for hotWindow, so that
// runs back to back or at once find one ready more often than one build
// per run would allow. Idle, it keeps one. A run on a dormant workspace
// wakes it (woke), to keep one again: not hot, for one run after a long
// idle time says nothing of the next; its caller starts the build (replace)
// as after a take.
func (p *prestarted) take() (_ *warm, woke bool) {
	p.mu.Lock()
	now := time.Now()
	switch {
	case p.want == 0 && !p.closed:
		p.want, woke = 1, true
		p.w.dormant.Store(false)
	case len(p.ready) == 0 || (p.building > 0 && now.Sub(p.lastTake) < hotWindow):
		p.heatLocked()
	}
	p.lastTake = now
	p.active++
	for len(p.ready) == 0 && p.building > 0 && !p.closed {
		// A build that outlived the workspace's going dormant is kept
		// too, if it ends while this run waits. One queued at the
		// prestart gate goes through at once, not all: they would
		// share the CPUs with the one the run waits for. One that was
		// not made (see build) leaves the others to wait for.
		select {
		case p.hurry <- struct{}{}:
		default:
		}
		built := p.built
		p.waiting++
		p.mu.Unlock()
		<-built
		p.mu.Lock()
		p.waiting--
	}
	// Tokens no queued build took (the builds were under way already)
	// must not let the next ones through; another waiting run's are
	// its own. A build may take one meanwhile: the receive does not
	// block.
	if p.waiting == 0 {
		for len(p.hurry) > 0 {
			select {
			case <-p.hurry:
			default:
			}
		}
	}
	defer p.mu.Unlock()
	var w *warm
	if n := len(p.ready); n > 0 {
		w = p.ready[n-1]
		// Cleared, not only cut off: the array would otherwise keep
		// the sandbox, its config and files, until the slot is reused,
		// which a workspace that goes dormant never does (see
		// TestWorkspaceDormantHeap).
		p.ready[n-1] = nil
		p.ready = p.ready[:n-1]
	}
	if w == nil && !woke {
		p.startLocked()
	}
	p.armLocked()
	return w, woke && w == nil
}

// done ends a run that take began: the workspace's idle time (see lower)
// starts again, and, if it was the last, so do the builds that runs ending
// before it held back (see replace).
func (p *prestarted) done() {
	p.mu.Lock()
	p.active--
	if p.active == 0 && p.held {
		p.held = false
		p.startLocked()
	}
	p.idleSince = time.Now()
	p.armLocked()
	p.mu.Unlock()
}

// heatLocked raises want to hotPrestart. p.mu is held; the caller arms the
// timer that lowers it again.
func (p *prestarted) heatLocked() {
	if !p.closed {
		p.want = hotPrestart
	}
}

// armLocked sets the timer for the next lowering of want: hotWindow after
// the last take while hot, idle after idleSince while it keeps one and
// runs none; none while dormant or closed. p.mu is held.
func (p *prestarted) armLocked() {
	var after time.Duration
	switch {
	case p.closed:
		return
	case p.want > 1:
		after = hotWindow - time.Since(p.lastTake)
	case p.want == 1 && p.idle > 0 && p.active == 0:
		after = p.idle - time.Since(p.idleSince)
	default:
		return
	}
	after = max(after, 0)
	if p.timer == nil {
		p.timer = time.AfterFunc(after, p.lower)
	} else {
		p.timer.Reset(after)
	}
}

// lower brings want back to 1 once no run has come for hotWindow, and to
// 0 (dormant) once the workspace has been idle for idle (see idleSince),
// and destroys the ready sandboxes beyond it. A build under way that ends
// beyond want is destroyed by build.
func (p *prestarted) lower() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	want := p.want
	if want > 1 && time.Since(p.lastTake) >= hotWindow {
		want = 1
	}
	idle := time.Since(p.idleSince)
	if want == 1 && p.idle > 0 && p.active == 0 && idle >= p.idle {
		want = 0
	}
	var surplus []*warm
	if want < p.want {
		p.want = want
		if len(p.ready) > want {
			surplus = append(surplus, p.ready[want:]...)
			clear(p.ready[want:]) // as in take
			p.ready = p.ready[:want]
		}
		if want == 0 {
			p.w.dormant.Store(true)
			p.w.m.log.Debug("workspace dormant: no sandbox kept started", "workspace", p.w.id, "idle", idle)
		}
	}
	p.armLocked()
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	for _, w := range surplus {
		w.destroy()
	}
	if want == 0 {
		// Its sandboxes are gone (each removed from the record), unless
		// one the dormancy does not count runs: its end drops it.
		p.w.dropNetNS()
	}
}

// replace starts building the next sandboxes, up to want, for a run that
// took one (see replaceLater), and reports whether it did. A run that ends
// while other runs of the workspace are under way holds the builds back
// until the last of them ends (done) or its replaceDelay is over (due),
// whichever comes first: a build's burst of CPU would otherwise compete
// with their commands and answers, and runs at once in one session (an
// agent's parallel tool calls) would each wait for the builds the first to
// end started.
func (p *prestarted) replace(due bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !due && p.active > 1 {
		p.held = true
		return false
	}
	p.held = false // startLocked starts what any held back too
	p.startLocked()
	return true
}

// close stops building, destroys the waiting sandboxes and waits for builds
// and teardowns under way.
func (p *prestarted) close() {
	p.mu.Lock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.wg.Wait()
	for _, w := range ready {
		w.destroy()
	}
}

// serves reports whether a waiting sandbox can run spec (on the workspace)
// as a fresh one would, as far as is known before it is tried.
func (p *prestarted) serves(spec *Spec) bool {
	return spec.Limits.WithDefaults().TmpfsSize == p.limits.TmpfsSize &&
		spec.Egress == nil && len(spec.ExtraFiles) <= 1
}

// relayTo opens, for the relay of a waiting sandbox's fd 3, the pipe whose
// write end f is: the sandbox gets the write end of a pipe of its own as
// its fd 3, and the run copies what comes out of it into f's pipe. The pipe
// is opened anew (its /proc/self/fd link), non-blocking and so in Go's
// poller, whatever f's mode: closing it stops a copy whose reader went away.
// nil if f is not the write end of a pipe that has a reader: such a run
// goes to a fresh sandbox.
func relayTo(f *os.File) *os.File {
	rc, err := f.SyscallConn() // not Fd, which makes f blocking
	if err != nil {
		return nil
	}
	var dst *os.File
	cerr := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return
		}
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil || fl&unix.O_ACCMODE != unix.O_WRONLY {
			return
		}
		// ENXIO if the pipe has no reader.
		dst, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			dst = nil
		}
	})
	if cerr != nil && dst != nil {
		dst.Close()
		dst = nil
	}
	return dst
}

// run runs spec (its Workspace is p.w) on the waiting sandbox w, or, if
// the sandbox cannot take it after all, on a fresh one. built: w was built
// for this run, a miss already counted (see runBuilt), not a prestarted
// one.
func (p *prestarted) run(ctx context.Context, w *warm, spec *Spec, relay *os.File, built bool) (*box.Result, error) {
	m := p.w.m
	miss := func() {
		if !built {
			p.misses.Add(1)
		}
	}
	if l := spec.Limits.WithDefaults(); l != w.sb.limits {
		if err := w.sb.setLimits(l); err != nil {
			m.log.Warn("a prestarted sandbox could not take a run's limits; running it cold", "err", err)
			if relay != nil {
				relay.Close()
			}
			w.destroy()
			miss()
			return m.Run(ctx, spec)
		}
	}
	cmd := spec.Command
	if p.w.proxied {
		// As Manager.Run gives a run on a proxied workspace.
		cmd.Env = append(proxyEnv(), cmd.Env...)
	}
	res, err := w.runCommand(ctx, &cmd, relay)
	if err == errNoDir {
		// The command never ran; a fresh sandbox's init creates a
		// missing directory, or enters one as its root.
		w.destroy()
		miss()
		return m.Run(ctx, spec)
	}
	if !built {
		p.hits.Add(1)
		if res != nil {
			res.Prestarted = true
		}
	}
	if err != nil {
		// Not known to be over: destroyed before the answer, as
		// Manager.Run destroys a workspace's sandboxes.
		_ = m.destroy(w.sb)
		return res, err
	}
	// Every process of the sandbox is gone (its pid namespace's init
	// was reaped, and the kernel reaps the rest first): its files are
	// written and its sockets closed. Its container, cgroup and record
	// go in the background, before the workspace closes.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return res, m.destroy(w.sb)
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		_ = m.destroy(w.sb)
	}()
	return res, nil
}

// runCommand gives a waiting sandbox (the pool's or a workspace's) cmd and
// collects the result. If relay is not nil (cmd has one extra file), what
// the command writes to its fd 3 is copied into relay, which runCommand
// closes. It waits for the command's exec (the end of the status pipe)
// before it feeds stdin, so that a command that did not start consumed
// nothing and can run elsewhere (errNoDir).
func (w *warm) runCommand(ctx context.Context, cmd *box.Command, relay *os.File) (*box.Result, error) {
	defer w.ctl.Close()
	files := 0
	if relay != nil {
		defer relay.Close()
		files = 1
	}
	// The executable pinned before the hand-over, the namespaces (and the
	// counter files opened) while the init execs the command, off the way
	// to the answer (see pinInit).
	proc := w.sb.procDir()
	w.sb.pinExe(proc)
	w.r.started = time.Now()
	_, err := w.ctl.Write(poolMessage(cmd, files, w.sb.m.workDir))
	if err == nil {
		err = shutdownWrite(w.ctl)
	}
	if h := w.sb.m.handoverHook; h != nil {
		h()
	}
	w.sb.pinNamespaces(proc)
	w.sb.openCounters()
	if err != nil {
		w.closePipes()
		return nil, fmt.Errorf("hand command to sandbox %s: %w", w.sb.id, err)
	}
	// The status pipe ends at the exec, or with a report: the command
	// could not start. The command has not run before it ends, so a
	// caller that gives up kills only the init.
	stop := context.AfterFunc(ctx, func() { _ = w.sb.c.Signal(unix.SIGKILL) })
	status, _ := io.ReadAll(w.ctl)
	stop()
	if err := initStatus(status, cmd); err != nil {
		w.closePipes()
		return nil, err
	}
	var relayed chan struct{}
	if relay != nil {
		relayed = make(chan struct{})
		go func() {
			defer close(relayed)
			_, _ = io.Copy(relay, w.extra)
		}()
	}
	w.r.stdin = cmd.Stdin // nil: collect closes stdin at once
	res, err := w.sb.collect(ctx, cmd, w.r)
	if relayed != nil {
		// Every writer is gone with the sandbox's processes: the copy
		// ends at EOF, unless a process lingers in the kernel or the
		// reader stopped reading.
		select {
		case <-relayed:
		case <-time.After(waitDelay):
			w.extra.Close()
			relay.Close()
			<-relayed
		}
	}
	if w.extra != nil {
		w.extra.Close()
	}
	return res, err
}

// runPrestarted runs spec (whose Workspace is w) on w's waiting sandbox if
// it has one that can serve it, else, if the sandbox kept could serve it
// but none is ready, on a fresh one (a miss); ok is false if spec is for a
// fresh one in any case.
func (w *Workspace) runPrestarted(ctx context.Context, spec *Spec) (_ *box.Result, _ error, ok bool) {
	p := w.pre
	if p == nil || !p.serves(spec) {
		return nil, nil, false
	}
	if err := w.m.validate(spec); err != nil {
		return nil, err, true
	}
	var relay *os.File
	if len(spec.ExtraFiles) == 1 {
		if relay = relayTo(spec.ExtraFiles[0]); relay == nil {
			return nil, nil, false
		}
	}
	sb, woke := p.take()
	defer p.done()
	if sb == nil {
		p.misses.Add(1)
		if woke {
			// The run's sandbox is built first: the one the workspace
			// keeps again starts as a taken one's replacement would.
			defer replaceLater(p.replace)()
		}
		res, err := p.runBuilt(ctx, spec, relay)
		return res, err, true
	}
	defer replaceLater(p.replace)()
	res, err := p.run(ctx, sb, spec, relay, false)
	return res, err, true
}

// runBuilt runs spec (a miss) on a waiting sandbox built for it, as a
// pool's miss does (see Pool.Run): its init loads the filter compiled once.
// Where the filter could not be probed, it runs in a fresh sandbox.
func (p *prestarted) runBuilt(ctx context.Context, spec *Spec, relay *os.File) (*box.Result, error) {
	m := p.w.m
	if m.waitingFilter() != nil {
		w, err := m.startWaiting(ctx, spec.Limits, p.w, true)
		if err == nil {
			return p.run(ctx, w, spec, relay, true)
		}
		if relay != nil {
			relay.Close()
		}
		return nil, err
	}
	if relay != nil {
		relay.Close() // a fresh sandbox gets the extra file itself
	}
	return m.Run(ctx, spec)
}

// Prestarted reports whether a sandbox waits for the workspace's next run
// now.
func (w *Workspace) Prestarted() bool {
	if w.pre == nil {
		return false
	}
	w.pre.mu.Lock()
	defer w.pre.mu.Unlock()
	return len(w.pre.ready) > 0
}
