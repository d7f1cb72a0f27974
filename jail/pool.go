package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
)

// A Pool keeps sandboxes started ahead of time and hands each the command of
// one run at request time, so that a run does not wait for a sandbox to be
// built: most of a sandbox's cost (namespaces, cgroups, mounts, the
// re-executed init, seccomp) is paid while no one waits.
//
// A pooled sandbox is an ordinary one (same limits, same isolation, the same
// teardown and crash sweep) whose init is jaild itself started as
// "pool-wait" (internal/inithook's C constructor, which runs before the Go
// runtime would): it blocks reading its command from a pipe. At request time
// the pool writes the command's arguments, environment, working directory
// and PATH; the init changes to the directory, looks the command up as a
// fresh sandbox's init would (so a missing or non-executable command gives
// the same ErrNotFound or ErrNotExecutable) and execs it directly: the
// command is pid 1 of its pid namespace, with nothing of the init left. The
// wait costs the sandbox well under a millisecond of CPU and a few pages of
// memory, counted in its CPU time and peak memory.
//
// A run that asks for other memory, pids or CPU limits than the pool's gets
// them set on the pooled sandbox's cgroup before its command is released.
// Runs that a pooled sandbox cannot serve go to a fresh sandbox as
// [Manager.Run] builds it: another tmpfs size than the pool's, a cwd other
// than the working directory (Config.WorkDir) or /tmp, a workspace, or
// extra files.
type Pool struct {
	m        *Manager
	limits   box.Limits
	ready    chan *warm
	room     chan struct{} // a token per place in the pool not yet filled
	stop     chan struct{}
	wg       sync.WaitGroup // the refill loop
	hits     atomic.Int64
	building atomic.Int32 // sandboxes being started for the pool
	misses   atomic.Int64
	once     sync.Once
}

// warm is a started sandbox waiting for its command. What it holds open
// while it waits is what a pooled sandbox or an idle session costs in
// descriptors (idleFDs): the control socket, the output pipes, stdin and
// the extra pipe. Its namespaces are pinned only when its command comes.
type warm struct {
	sb  *sandbox
	r   *running
	ctl *os.File // the init's fd 3 and 4: command in, status out
	// extra is the read end of the init's fd 5; nil if it has none.
	extra *os.File
}

// idleFDs bounds the descriptors jaild holds for one waiting sandbox:
// ctl, the read ends of stdout and stderr, the write end of stdin and
// extra, and the pidfd of its init (os.Process's handle).
const idleFDs = 6

// poolInit is the pooled sandbox's init: the binary libcontainer started as
// the container's init (its sealed copy), again, as "pool-wait". It reads
// its command from fd 3 until EOF, which the pool writes and shuts down at
// request time, and reports a command it cannot run on fd 4, which the
// command never gets, so the command cannot forge that report. Both are
// the one end of a socket pair whose other end is the warm's ctl.
//
// poolInitFilter is the same init that first loads the sandbox's seccomp
// filter, which the control socket carries before the command (see
// seccompprobe.go); it refuses to go on without one.
var (
	poolInit       = []string{"/proc/self/exe", "pool-wait"}
	poolInitFilter = []string{"/proc/self/exe", "pool-wait", "seccomp"}
)

// waitingFilter is the frame of the filter waiting sandboxes load
// themselves, probed once, at the first one's build; nil: they keep it in
// libcontainer's config, and why was logged.
func (m *Manager) waitingFilter() []byte {
	m.filterOnce.Do(func() {
		if m.noFilterProbe {
			return
		}
		p, err := probeSeccomp()
		if err != nil {
			m.log.Warn("waiting sandboxes compile their seccomp filter in each init", "err", err)
			return
		}
		m.filter = p.frame()
	})
	return m.filter
}

// NewPool starts a pool that keeps size sandboxes with limits l ready. Close
// it before closing m.
func (m *Manager) NewPool(size int, l box.Limits) (*Pool, error) {
	if size <= 0 {
		return nil, fmt.Errorf("jail: pool size %d: must be positive", size)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		m:      m,
		limits: l.WithDefaults(),
		ready:  make(chan *warm, size),
		room:   make(chan struct{}, size),
		stop:   make(chan struct{}),
	}
	for range size {
		p.room <- struct{}{}
	}
	p.wg.Add(1)
	go p.refill()
	return p, nil
}

// refill keeps the pool full. A failing start backs off, so that a broken
// host is not hammered, and is logged.
func (p *Pool) refill() {
	defer p.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		// Build only for a free place: the pool never holds more than
		// its size.
		select {
		case <-p.room:
		case <-p.stop:
			return
		}
		p.building.Add(1)
		w, err := p.prestart()
		p.building.Add(-1)
		if err != nil {
			p.room <- struct{}{}
			p.m.log.Warn("starting a pooled sandbox", "err", err, "retry_in", backoff)
			select {
			case <-p.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		p.ready <- w // never blocks: ready has a place per token
	}
}

// prestart builds a sandbox and starts its waiting init.
func (p *Pool) prestart() (*warm, error) {
	return p.m.startWaiting(context.Background(), p.limits, nil, false)
}

// startWaiting builds a sandbox with limits l (on ws if not nil) and starts
// its waiting init, unless ctx has ended. With extra, the init also holds
// the write end of a pipe at fd 5, whose read end is the warm's extra: the
// init makes it the command's fd 3 if the message asks for it (see
// poolMessage), else closes it.
func (m *Manager) startWaiting(ctx context.Context, l box.Limits, ws *Workspace, extra bool) (_ *warm, retErr error) {
	filter := m.waitingFilter()
	sb, err := m.create(ctx, l, ws, false, filter != nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = sb.Destroy()
		}
	}()
	var closers []io.Closer
	defer func() {
		if retErr != nil {
			for _, c := range closers {
				c.Close()
			}
		}
	}()
	ctl, ctlChild, err := controlPair()
	if err != nil {
		return nil, err
	}
	closers = append(closers, ctl, ctlChild)
	args := poolInit
	if filter != nil {
		// The socket's buffer takes the program whole: it is there
		// when the init starts reading.
		if m.filterFrameHook != nil {
			filter = m.filterFrameHook(filter)
		}
		if _, err := ctl.Write(filter); err != nil {
			return nil, fmt.Errorf("send the seccomp filter: %w", err)
		}
		args = poolInitFilter
	}
	files := []*os.File{ctlChild, ctlChild}
	var extraR *os.File
	if extra {
		var extraW *os.File
		if extraR, extraW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create extra pipe: %w", err)
		}
		closers = append(closers, extraR, extraW)
		files = append(files, extraW)
	}
	proc := &libcontainer.Process{
		Args:       args,
		Env:        environ(nil, m.workDir),
		Cwd:        m.workDir,
		UID:        SandboxUID,
		GID:        SandboxGID,
		ExtraFiles: files,
		Init:       true,
	}
	sb.used = true
	// A pipe for stdin whatever the command will want: it is fed or
	// closed at request time.
	r, err := sb.startProcess(proc, pipeStdin{}, false)
	if err != nil {
		return nil, fmt.Errorf("start pooled sandbox: %w", err)
	}
	// startProcess closed the files the sandbox holds.
	return &warm{sb: sb, r: r, ctl: ctl, extra: extraR}, nil
}

// controlPair makes a waiting init's control socket: the parent's end,
// non-blocking (in Go's poller), and the init's, blocking, for its read.
func controlPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create control socket: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("create control socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control"), nil
}

// shutdownWrite ends what the init reads from f (its command): EOF.
func shutdownWrite(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return serr
}

// pipeStdin makes startProcess give the process a stdin pipe; collect
// replaces it with the command's own stdin.
type pipeStdin struct{}

func (pipeStdin) Read([]byte) (int, error) { return 0, errors.New("no stdin") }

// destroy tears a sandbox down that never got a command.
func (w *warm) destroy() {
	w.closePipes()
	_ = w.sb.Destroy()
}

// closePipes closes the pool's ends of a waiting sandbox's pipes: its init
// then reads EOF and exits.
func (w *warm) closePipes() {
	w.ctl.Close()
	w.r.outR.Close()
	w.r.errR.Close()
	w.r.stdinW.Close()
	if w.extra != nil {
		w.extra.Close()
	}
}

// Run implements the same contract as [Manager.Run], on a pooled sandbox
// when one is ready and can serve spec, else on a fresh one.
//
// A run the pool serves but finds no sandbox ready for (a miss) gets one
// built for it in the same waiting init, with its limits, and handed its
// command at once: that init loads the seccomp filter the Manager compiled
// once, where a fresh sandbox whose init is the command has libcontainer
// compile it (see seccompprobe.go). Where the filter could not be probed,
// a miss runs in a fresh sandbox.
func (p *Pool) Run(ctx context.Context, spec *Spec) (*box.Result, error) {
	if err := p.m.validate(spec); err != nil {
		return nil, err
	}
	if !p.serves(spec) {
		return p.m.Run(ctx, spec)
	}
	var w *warm
	select {
	case w = <-p.ready:
		defer replaceLater(func(bool) bool { p.room <- struct{}{}; return true })()
	default:
		p.misses.Add(1)
		return p.runBuilt(ctx, spec)
	}
	if l := spec.Limits.WithDefaults(); l != w.sb.limits {
		if err := w.sb.setLimits(l); err != nil {
			p.m.log.Warn("a pooled sandbox could not take a run's limits; running it cold", "err", err)
			w.closePipes()
			_ = p.m.release(w.sb)
			p.misses.Add(1)
			return p.m.Run(ctx, spec)
		}
	}
	p.hits.Add(1)
	res, err := w.runCommand(ctx, &spec.Command, nil)
	if res != nil {
		res.Prestarted = true
	}
	// The caller has its answer; the teardown need not delay it (see
	// teardown.go).
	if derr := p.m.release(w.sb); err == nil {
		err = derr
	}
	return res, err
}

// runBuilt runs spec (a miss) on a waiting sandbox built for it, or,
// where the filter could not be probed, on a fresh one (see Run).
func (p *Pool) runBuilt(ctx context.Context, spec *Spec) (*box.Result, error) {
	if p.m.waitingFilter() == nil {
		return p.m.Run(ctx, spec)
	}
	w, err := p.m.startWaiting(ctx, spec.Limits, nil, false)
	if err != nil {
		return nil, err
	}
	res, err := w.runCommand(ctx, &spec.Command, nil)
	if derr := p.m.release(w.sb); err == nil {
		err = derr
	}
	return res, err
}

// replaceDelay is how long a run on a prestarted sandbox (the pool's or a
// workspace's) holds back the build of its replacement while its command
// runs; see replaceLater.
const replaceDelay = 50 * time.Millisecond

// replaceLater calls replace, which starts the build of a sandbox that
// replaces the one a run took, once: when the returned func is called (the
// run has ended) or replaceDelay after the take, whichever comes first. A
// build is a burst of CPU (a Go process start, the container's mounts, the
// kernel's namespace work): started at the take, it would compete for the
// host's cores with the very command it replaces and with the answer's
// path, and on a small host lengthen every paced caller's run
// (docs/performance.md). A long command still gets its replacement built
// while it runs.
//
// replace is told whether replaceDelay is over (due); before, it may
// decline (return false), and is called again, due, when replaceDelay is
// over (see prestarted.replace).
func replaceLater(replace func(due bool) bool) (now func()) {
	var (
		mu       sync.Mutex
		replaced bool
	)
	call := func(due bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if !replaced {
			replaced = replace(due)
		}
		return replaced
	}
	t := time.AfterFunc(replaceDelay, func() { call(true) })
	return func() {
		if call(false) {
			t.Stop()
		}
	}
}

// serves reports whether a pooled sandbox can run spec exactly as a fresh
// one would.
func (p *Pool) serves(spec *Spec) bool {
	// Other memory, pids and CPU limits are set before the command is
	// released (see setLimits); the tmpfs size is a mount option.
	return spec.Limits.WithDefaults().TmpfsSize == p.limits.TmpfsSize &&
		spec.Workspace == nil && spec.Egress == nil && len(spec.ExtraFiles) == 0 &&
		pooledDir(spec.Dir, p.m.workDir)
}

// pooledDir reports whether a pooled sandbox can run a command in dir: the
// working directory workDir and /tmp, fresh tmpfs mounts, are the only
// directories it may be given that always exist; a fresh sandbox's init
// creates any other (as the sandbox's root), which the waiting init,
// already the sandbox user, must not do differently.
func pooledDir(dir, workDir string) bool {
	switch d := path.Clean("/" + dir); d {
	case "/", workDir, "/tmp":
		return true
	}
	return false
}

// initStatus is the error of a waiting init's report on its status pipe,
// nil for none (the command was exec'ed).
func initStatus(status []byte, cmd *box.Command) error {
	switch s := strings.TrimSpace(string(status)); s {
	case "":
		return nil
	case "nodir":
		return errNoDir
	case "notfound":
		return fmt.Errorf("%w: %s", box.ErrCommandNotFound, cmd.Args[0])
	case "notexec":
		return fmt.Errorf("%w: %s", box.ErrNotExecutable, cmd.Args[0])
	default:
		return fmt.Errorf("start sandbox: pooled init: %s", s)
	}
}

// errNoDir: the waiting init could not enter the command's directory; the
// command never ran.
var errNoDir = errors.New("pooled init: no such directory")

// poolMessage is the command as the waiting init reads it (see
// internal/inithook/poolwait.c): NUL-terminated strings, the PATH to look
// the command up in, the working directory, how many extra files the
// command gets (0, or 1: the init's fd 5 becomes its fd 3), the number of
// arguments, the arguments, then the environment. Validate has refused NUL
// bytes in all of them.
func poolMessage(cmd *box.Command, files int, workDir string) []byte {
	env := environ(cmd.Env, workDir)
	path := Path
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	dir := cmd.Dir
	if dir == "" {
		dir = workDir
	}
	var b []byte
	add := func(s string) { b = append(append(b, s...), 0) }
	add(path)
	add(dir)
	add(strconv.Itoa(files))
	add(strconv.Itoa(len(cmd.Args)))
	for _, a := range cmd.Args {
		add(a)
	}
	for _, kv := range env {
		add(kv)
	}
	return b
}

// Ready is how many sandboxes wait for a command now.
func (p *Pool) Ready() int { return len(p.ready) }

// Stats reports how many runs a pooled sandbox served (hits) and how many
// eligible runs found the pool empty (misses).
func (p *Pool) Stats() (hits, misses int64) { return p.hits.Load(), p.misses.Load() }

// Close stops refilling, destroys the sandboxes still waiting and waits for
// background teardowns. Runs still in progress finish normally.
func (p *Pool) Close() error {
	p.once.Do(func() { close(p.stop) })
	// The refill loop stops at once, or after the sandbox it is
	// building; background teardowns finish.
	p.wg.Wait()
	p.m.WaitTeardowns()
	for {
		select {
		case w := <-p.ready:
			w.destroy()
		default:
			return nil
		}
	}
}
