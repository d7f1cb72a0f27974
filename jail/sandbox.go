package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// waitDelay bounds each wait after a kill: for the init process to be
// reaped, and then for the output pipes to drain. A process stuck in the
// kernel must not hang jaild; whatever is left is destroyed anyway.
const waitDelay = 5 * time.Second

// sandbox is one created container that runs one command. Methods are not
// safe for concurrent use, except that Destroy may follow a Run that was
// cancelled through its context.
type sandbox struct {
	m      *Manager
	id     string
	c      *libcontainer.Container
	slot   *slot      // nil on a workspace, whose slot it uses
	ws     *Workspace // nil for a sandbox on a slot of its own
	hostID int        // where the uid range of its user namespace starts
	group  *cgroup.Group
	limits box.Limits
	used   bool
	// netns and proxy are a sandbox with egress's network namespace
	// pin and the proxy listener in it; empty and nil otherwise.
	netns string
	proxy *net.TCPListener
	// join is what a sandbox on a workspace joins, until its init has
	// (see wsJoin); nil otherwise.
	join *wsJoin
	// root is the sandbox's own root in the Manager's namespace, until
	// its init has copied it (see sandboxroot.go); nil otherwise.
	root *sandboxRoot
	// net is the network namespace made for this sandbox alone, until
	// its init has joined it (see newNetNS); nil otherwise. ownNet says
	// the sandbox had one: it is pinned as the namespaces the init made.
	net    *os.File
	ownNet bool
	// pins hold the namespaces and the executable of the sandbox's init
	// open from its command's start until Destroy (see pinInit).
	pins []int
	// counters are the cgroup's counter files, opened while the command
	// runs (see openCounters); nil until then.
	counters *cgroup.Counters
	// init is the process started in the sandbox, nil until one is.
	init *initProc
}

// initProc is the process started in a sandbox (its init, pid 1 of its pid
// namespace) and the one waiter of it. Every end of a sandbox goes through
// it: a run's collect waits for the command's exit, and Destroy, after its
// SIGKILL, for an init that never got a command (a pooled or prestarted
// sandbox discarded unused, or whose command could not start). An exited
// child that is never waited for stays a zombie of this process until it
// exits, and keeps its pid charged to the pids budget of the parent cgroup:
// each would take a place of every later sandbox.
type initProc struct {
	p    *libcontainer.Process
	once sync.Once
	done chan struct{} // closed once the init was reaped; ps and err set
	ps   *os.ProcessState
	err  error
}

func newInitProc(p *libcontainer.Process) *initProc {
	return &initProc{p: p, done: make(chan struct{})}
}

// exited returns a channel closed once the init has been reaped. The wait
// starts at the first call, not at the start: a goroutine blocked in the
// wait holds an OS thread, which a pooled sandbox waiting for its command
// need not cost. The wait itself is never abandoned: a caller that stops
// waiting (after waitDelay) leaves the waiter to reap the init whenever the
// kernel lets it go.
func (ip *initProc) exited() <-chan struct{} {
	ip.once.Do(func() {
		go func() {
			ip.ps, ip.err = ip.p.Wait()
			close(ip.done)
		}()
	})
	return ip.done
}

// ID is the sandbox's id, also its container and cgroup name.
func (s *sandbox) ID() string { return s.id }

// Limits are the sandbox's resource limits, with defaults applied.
func (s *sandbox) Limits() box.Limits { return s.limits }

// Run runs cmd as the sandbox's init process and waits for it. A sandbox
// runs one command; a second Run fails. See [Manager.Run] for how timeouts
// and cancellation are reported.
func (s *sandbox) Run(ctx context.Context, cmd *box.Command) (*box.Result, error) {
	if err := cmd.Validate(); err != nil {
		return nil, err
	}
	if err := box.CheckDir(cmd.Dir, s.m.workDir); err != nil {
		return nil, err
	}
	if s.used || s.c == nil {
		return nil, box.ErrClosed
	}
	s.used = true

	dir := cmd.Dir
	if dir == "" {
		dir = s.m.workDir
	}
	p := &libcontainer.Process{
		Args: cmd.Args,
		Env:  environ(cmd.Env, s.m.workDir),
		Cwd:  dir,
		UID:  SandboxUID,
		GID:  SandboxGID,
		Init: true,
	}
	// Duplicates, which startProcess closes once the sandbox holds them:
	// the caller's files stay the caller's, as with os/exec.
	for _, f := range cmd.ExtraFiles {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, d := range p.ExtraFiles {
				d.Close()
			}
			return nil, fmt.Errorf("pass extra file: %w", err)
		}
		p.ExtraFiles = append(p.ExtraFiles, os.NewFile(uintptr(fd), f.Name()))
	}
	st, err := s.startProcess(p, cmd.Stdin, true)
	if err != nil {
		// startProcess closes them only once the sandbox holds them; a
		// duplicate left open would keep a reader of the caller's pipe
		// from ever seeing EOF.
		for _, d := range p.ExtraFiles {
			d.Close()
		}
		err = s.m.startError(cmd.Args[0], err)
		var pe *pidsBudgetError
		if errors.As(err, &pe) {
			s.m.log.Warn("sandbox not started: the pids budget is used up", "sandbox", s.id, "err", pe.cause)
		}
		return nil, err
	}
	return s.collect(ctx, cmd, st)
}

// running is a process started in a sandbox, with the parent's ends of its
// pipes.
type running struct {
	// started is when the command was released to run: the timeout and
	// Duration count from it.
	started    time.Time
	outR, errR *os.File
	// stdinW, if not nil, is fed from stdin once the command runs.
	stdinW *os.File
	stdin  io.Reader
}

// startProcess starts p in the sandbox with fresh output pipes and stdin
// from in (nil: /dev/null; an *os.File is handed over as it is). With pin,
// the sandbox's namespaces are pinned at once (see pinInit); a waiting init's
// are pinned when it gets its command, so that an idle one holds no
// descriptors for them.
func (s *sandbox) startProcess(p *libcontainer.Process, in io.Reader, pin bool) (_ *running, retErr error) {
	var closers []io.Closer
	defer func() {
		if retErr != nil {
			for _, c := range closers {
				c.Close()
			}
		}
	}()
	outR, outW, err := s.pipe()
	if err != nil {
		return nil, err
	}
	closers = append(closers, outR, outW)
	errR, errW, err := s.pipe()
	if err != nil {
		return nil, err
	}
	closers = append(closers, errR, errW)
	p.Stdout, p.Stderr = outW, errW
	r := &running{outR: outR, errR: errR, stdin: in}
	var stdinR *os.File
	switch f := in.(type) {
	case nil:
	case *os.File:
		p.Stdin = f
	default:
		if stdinR, r.stdinW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create stdin pipe: %w", err)
		}
		closers = append(closers, stdinR, r.stdinW)
		p.Stdin = stdinR
	}
	// No sandbox process without a watchdog to kill it should jaild die.
	// Waited for only here, so that its start overlaps the sandbox's
	// creation.
	if err := s.m.dog.ensure(); err != nil {
		return nil, err
	}
	// Start, then release the command with Exec, noting when: the init
	// may be slow to report back, and a quick command ends before Run
	// would return.
	err = s.c.Start(p)
	// The init has joined its namespaces and copied its root, or failed.
	s.releaseStart()
	if err != nil {
		// libcontainer killed and reaped what it started.
		return nil, err
	}
	// From here on the init is this sandbox's to reap, on every path:
	// Destroy waits for it.
	s.init = newInitProc(p)
	if pin {
		s.pinInit()
	}
	r.started = time.Now()
	if err := s.c.Exec(); err != nil {
		return nil, err
	}
	// The container holds its own copies now; ours would keep the
	// readers from ever seeing EOF.
	outW.Close()
	errW.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	for _, f := range p.ExtraFiles {
		f.Close()
	}
	return r, nil
}

// pinInit pins the namespaces and the executable of the sandbox's init,
// once: it holds them open until Destroy, so that the kernel's work of
// ending them happens there, after the answer (see teardown.go), rather
// than on the way to it (docs/performance.md has the figures):
//
//   - A namespace ends when its last reference goes: unpinned, when the
//     command exits, and the exit of the container's pid 1 (unmounting the
//     sandbox's mount tree, ...) delays its parent's wait, between the exit
//     and the SIGCHLD.
//   - libcontainer runs the init from a sealed copy of jaild (an overlayfs
//     mount that only the init's executable holds, against CVE-2019-5736).
//     Unpinned, the command's exec drops it, and the command's first return
//     to user space then tears the overlay down, waiting out an expedited
//     RCU grace period in uninterruptible sleep. So the executable is
//     pinned before the command is handed over (after, the init may have
//     exec'd it already); the namespaces may be pinned while it starts,
//     as they end only with the command.
//
// Best effort: what cannot be opened (the init has ended) ends as it would
// have. The pins are bare descriptors: nothing reads them, and an *os.File
// would cost each a round with Go's poller.
func (s *sandbox) pinInit() {
	dir := s.procDir()
	s.pinExe(dir)
	s.pinNamespaces(dir)
	s.openCounters()
}

// openCounters opens the cgroup's counter files for collect's readUsage,
// off the way from the command's exit to the answer: they are opened while
// the command starts and closed with the pins. Best effort: readUsage
// opens them itself if this failed.
func (s *sandbox) openCounters() {
	if s.counters != nil {
		return
	}
	if c, err := s.group.OpenCounters(); err == nil {
		s.counters = c
	}
}

// procDir opens the /proc directory of the sandbox's init, for the pins,
// or returns -1 if it is pinned already or cannot be opened. The directory
// stands for that process: should it end and its pid be taken by
// another, what is opened in it fails rather than find the other's.
func (s *sandbox) procDir() int {
	if s.pins != nil || s.init == nil {
		return -1
	}
	pid, err := s.init.p.Pid()
	if err != nil {
		return -1
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// pinExe pins the executable of the init whose /proc directory is dir.
func (s *sandbox) pinExe(dir int) { s.pinAt(dir, "exe") }

// pinNamespaces pins the namespaces of the init whose /proc directory is
// dir, and closes dir.
func (s *sandbox) pinNamespaces(dir int) {
	if dir < 0 {
		return
	}
	defer unix.Close(dir)
	for _, ns := range s.c.Config().Namespaces {
		// The sandbox's own, not one it shares (a workspace's, an
		// egress pin's).
		if ns.Path == "" || ns.Type == configs.NEWNET && s.ownNet {
			s.pinAt(dir, "ns/"+configs.NsName(ns.Type))
		}
	}
}

// pinAt opens name in dir, if it can, as a pin.
func (s *sandbox) pinAt(dir int, name string) {
	if dir < 0 {
		return
	}
	if fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		s.pins = append(s.pins, fd)
	}
}

// unpin closes the pins and the counter files.
func (s *sandbox) unpin() {
	for _, fd := range s.pins {
		unix.Close(fd)
	}
	s.pins = nil
	if s.counters != nil {
		s.counters.Close()
		s.counters = nil
	}
}

// collect waits for a started command under cmd's timeout, drains its
// output and reads the verdict. The timeout and Duration count from
// r.started.
func (s *sandbox) collect(ctx context.Context, cmd *box.Command, r *running) (*box.Result, error) {
	defer r.outR.Close()
	defer r.errR.Close()
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = box.DefaultTimeout
	}
	maxOut := cmd.MaxOutput
	if maxOut == 0 {
		maxOut = box.DefaultMaxOutput
	}
	runCtx, cancel := context.WithDeadline(ctx, r.started.Add(timeout))
	defer cancel()

	if r.stdinW != nil {
		// Abandoned if in.Read blocks past the command's end, like
		// os/exec; closing stdinW then makes its next Write fail.
		go func() {
			if r.stdin != nil {
				_, _ = io.Copy(r.stdinW, r.stdin)
			}
			r.stdinW.Close()
		}()
		defer r.stdinW.Close()
	}

	stdout := newCapture(maxOut, cmd.Stdout)
	stderr := newCapture(maxOut, cmd.Stderr)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); _, _ = io.Copy(stdout, r.outR) }()
	go func() { defer readers.Done(); _, _ = io.Copy(stderr, r.errR) }()

	res := &box.Result{ID: s.id, Limits: s.limits}
	ps, waitErr := s.wait(ctx, runCtx, res)
	res.Duration = time.Since(r.started)

	// Output written before the end is still in the pipes: drain it, but
	// not forever if a process of the sandbox lingers in the kernel.
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(waitDelay):
		r.outR.Close()
		r.errR.Close()
		<-drained
	}

	res.Stdout, res.StdoutBytes, res.StdoutTruncated = stdout.String(), stdout.total, stdout.truncated()
	res.Stderr, res.StderrBytes, res.StderrTruncated = stderr.String(), stderr.total, stderr.truncated()
	setExitStatus(res, ps)
	// Counters are read before Destroy removes the cgroup.
	s.readUsage(res)

	var exitErr *exec.ExitError
	if waitErr != nil && ps == nil && !errors.As(waitErr, &exitErr) {
		return res, fmt.Errorf("wait for sandbox %s: %w", s.id, waitErr)
	}
	if res.Canceled {
		return res, ctx.Err()
	}
	return res, nil
}

// wait waits for the command's end, or kills the sandbox when runCtx ends
// first (its deadline: a timeout; ctx's end: a cancel, both marked in res)
// and waits for its init to be gone.
func (s *sandbox) wait(ctx, runCtx context.Context, res *box.Result) (*os.ProcessState, error) {
	select {
	case <-s.init.exited():
		return s.init.ps, s.init.err
	case <-runCtx.Done():
	}
	if ctx.Err() != nil {
		res.Canceled = true
	} else {
		res.TimedOut = true
	}
	// Killing the pid namespace's init makes the kernel kill every other
	// process in it.
	if err := s.c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
		s.m.log.Warn("killing sandbox", "id", s.id, "err", err)
	}
	select {
	case <-s.init.exited():
		return s.init.ps, s.init.err
	case <-time.After(waitDelay):
		return nil, errors.New("sandbox init did not exit after SIGKILL")
	}
}

// setExitStatus sets res's exit code and signal from ps; a nil ps (the
// init's status is unknown) is exit code -1.
func setExitStatus(res *box.Result, ps *os.ProcessState) {
	res.ExitCode = -1
	if ps == nil {
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok { // not unix.WaitStatus: that assertion fails silently
		if ws.Signaled() {
			res.Signal = unix.SignalName(ws.Signal())
		} else {
			res.ExitCode = ws.ExitStatus()
		}
	}
}

// readUsage puts the sandbox cgroup's counters in res.
func (s *sandbox) readUsage(res *box.Result) {
	var u cgroup.Usage
	var err error
	if s.counters != nil {
		u, err = s.counters.Read()
	} else {
		u, err = s.group.Read()
	}
	if err != nil {
		s.m.log.Warn("reading sandbox usage", "id", s.id, "err", err)
		return
	}
	res.CPUTime, res.MemoryPeak = u.CPU, u.MemoryPeak
	res.OOMKilled = u.OOMKills > 0
	res.PidsLimitHit = u.PidsMax > 0
}

// pipe returns an output pipe whose write end the container can use: it is
// handed over as the container's root, which maps to the slot's host id.
func (s *sandbox) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("create output pipe: %w", err)
	}
	if err := w.Chown(s.hostID, s.hostID); err != nil {
		r.Close()
		w.Close()
		return nil, nil, fmt.Errorf("chown output pipe: %w", err)
	}
	return r, w, nil
}

// startError classifies a failure to start the command. libcontainer
// reports the init's exec failure, and a clone refused in its init, only
// as text: EAGAIN is what fork, clone and Go's thread creation get from a
// pids cgroup at its limit (strerror's "Resource temporarily
// unavailable", as nsexec reports it).
func startError(name string, err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, unix.EAGAIN), strings.Contains(strings.ToLower(msg), unix.EAGAIN.Error()), eagainErrno.MatchString(msg):
		return &pidsBudgetError{cause: err}
	case strings.Contains(msg, "executable file not found"), strings.Contains(msg, "no such file or directory"):
		return fmt.Errorf("%w: %s", box.ErrCommandNotFound, name)
	case strings.Contains(msg, "permission denied"), strings.Contains(msg, "exec format error"):
		return fmt.Errorf("%w: %s", box.ErrNotExecutable, name)
	}
	return fmt.Errorf("start sandbox: %w", err)
}

// startPids is more than a sandbox's start takes at its peak: its init's
// nsexec stages and the threads of its Go runtime.
const startPids = 32

// startError is the package's startError, and also box.ErrPidsBudget for a
// start that failed in another way (runc's init died: "procReady not
// received", "container process is already dead") while the parent's pids
// budget had no room for a start: a thread the init's runtime could not
// create kills it with no EAGAIN in what libcontainer reports.
func (m *Manager) startError(name string, err error) error {
	err = startError(name, err)
	if errors.Is(err, box.ErrCommandNotFound) || errors.Is(err, box.ErrNotExecutable) || errors.Is(err, box.ErrPidsBudget) {
		return err
	}
	if free, ok := m.parent.PidsFree(); ok && free < startPids {
		return &pidsBudgetError{cause: err}
	}
	return err
}

// eagainErrno is how the Go runtime of runc's init reports a thread it
// could not create ("failed to create new OS thread ... errno=11").
var eagainErrno = regexp.MustCompile(`errno=11\b`)

// pidsBudgetError is box.ErrPidsBudget, with the start's own error for the log.
// Its message is box.ErrPidsBudget's alone: the cause names host pids.
type pidsBudgetError struct{ cause error }

func (e *pidsBudgetError) Error() string { return box.ErrPidsBudget.Error() }
func (e *pidsBudgetError) Unwrap() error { return box.ErrPidsBudget }

// environ builds the command's environment: fixed defaults (HOME is the
// working directory workDir), overridden by the caller's pairs. Nothing
// comes from jaild's own environment.
func environ(extra []string, workDir string) []string {
	env := []string{"PATH=" + Path, "HOME=" + workDir, "USER=" + sandboxUser.Name, "LANG=C.UTF-8"}
	idx := map[string]int{}
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			env[i] = kv
			continue
		}
		idx[k] = len(env)
		env = append(env, kv)
	}
	return env
}

// releaseStart releases what only the start of the sandbox's init needed:
// the files through which it joins its workspace's or its own network
// namespace, and its own root in the Manager's namespace. Safe more than
// once.
func (s *sandbox) releaseStart() {
	s.join.close()
	if s.net != nil {
		s.net.Close()
		s.net = nil
	}
	if err := s.root.close(); err != nil {
		s.m.log.Warn("sandbox root", "id", s.id, "err", err)
	}
}

// Destroy kills anything still running in the sandbox and removes its
// container state, cgroup and uid range. It is safe to call more than once.
func (s *sandbox) Destroy() error {
	if s.c == nil {
		return nil
	}
	defer s.m.live.Done()
	var err error
	_ = s.c.Signal(unix.SIGKILL)
	deadline := time.Now().Add(waitDelay)
	if s.init != nil {
		// Reaped here if no run did: killing an init does not reap it,
		// and libcontainer counts a zombie init as stopped, so Destroy
		// below would succeed and leave it.
		select {
		case <-s.init.exited():
		case <-time.After(time.Until(deadline)):
			s.m.log.Warn("sandbox init not reaped after SIGKILL; its waiter stays", "id", s.id)
		}
	}
	for {
		err = s.c.Destroy()
		if err == nil || time.Now().After(deadline) {
			break
		}
		// "container still running": the init has not died yet.
		time.Sleep(5 * time.Millisecond)
	}
	// The init is gone (or stuck, its waiter left to reap it): its namespaces
	// end now, before the slot's uid range can go to another sandbox.
	s.unpin()
	s.releaseStart() // a sandbox destroyed before it started
	if err != nil {
		// Keep the slot record (a workspace's keeps listing the
		// sandbox): the next sweep or the workspace's Close finishes
		// the job.
		if s.slot != nil {
			s.slot.keep()
		}
		s.c = nil
		return fmt.Errorf("destroy sandbox %s: %w", s.id, err)
	}
	if s.proxy != nil {
		// The namespace ends once the listener (and the sockets the
		// proxy accepted) are closed and the pin is gone.
		s.proxy.Close()
		if err := removeNetNS(s.netns); err != nil {
			// Keep the record: the next sweep retries.
			s.slot.keep()
			s.c = nil
			return fmt.Errorf("destroy sandbox %s: %w", s.id, err)
		}
	}
	if s.ws != nil {
		s.ws.remove(s.id)
	} else {
		s.slot.release()
	}
	s.c = nil
	return nil
}
