package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"golang.org/x/sys/unix"
)

// A sandbox outlives a jaild that dies: nothing in the kernel ties a
// container to the process that built it (libcontainer's ParentDeathSignal
// is per OS thread and unreliable under Go, and a wrapper inside the sandbox
// would take pid 1 from the command). The sweep at the next jaild start is
// too late for a sandbox with a deadline, and may never come. So every
// Manager has a watchdog: this binary again, started with WatchdogArg, in a
// session of its own so that a terminal's signals to jaild's process group
// do not reach it, ignoring the signals that ask a process to stop. It waits
// for its owner's pidfd to turn readable: the owner died, and the kernel
// has by then closed all of its files and so dropped its slot locks (a
// pipe's EOF alone can come before the owner's other files are closed).
// The watchdog then sweeps the owner's orphaned slots, as Manager.Sweep
// does, releases the parent cgroup if no other jaild holds it, and exits.
// Other processes' orphans it leaves to their own watchdogs or to the sweep
// at the next start: it does its owner's work, no more. In a binary that
// links internal/inithook, the wait begins in a C constructor, before the Go
// runtime starts (internal/inithook/watchdog.c): a watchdog costs a Go
// program's start only once it has work to do.
//
// A Manager that closes has destroyed its sandboxes and has nothing left for
// the watchdog to do: it SIGKILLs and reaps it. A polite request would make
// a short one-shot run wait, at exit, until the watchdog had finished
// starting only to hear it. If the watchdog dies while its owner lives, the
// owner logs it and starts another; no sandbox's init starts before a
// watchdog runs.

// WatchdogArg is os.Args[1] of a Manager's watchdog process.
const WatchdogArg = "watchdog"

// dispatching records that this binary calls [MaybeWatchdog]: only then may
// a Manager start watchdogs.
var dispatching atomic.Bool

// errNoDispatch is the start of a watchdog in a binary that does not call
// MaybeWatchdog. Such a binary would run its own main as the watchdog: a
// test binary its tests, whose Managers would start watchdogs that run the
// tests again, without end. No sandbox starts without a watchdog, so the
// Manager fails instead.
var errNoDispatch = errors.New("jail: this binary does not dispatch its watchdog: call jail.MaybeWatchdog first thing (internal/inithook does)")

// MaybeWatchdog turns this process into a Manager's watchdog, and never
// returns, if it was started as one (os.Args[1] is WatchdogArg), or into
// its seccomp probe (SeccompProbeArg, see seccompprobe.go); otherwise it
// returns at once. Like libcontainer.Init for "init", it is an explicit
// step of every binary that creates a Manager, taken before the binary does
// anything else: jaild's binaries and test binaries take it by importing
// internal/inithook, whose init calls it. A Manager in a binary that has not
// called it refuses to start sandboxes.
func MaybeWatchdog() {
	if len(os.Args) > 1 && os.Args[1] == WatchdogArg {
		// Pin main to the main thread first, as a container init's
		// binary does: the sweep's libcontainer calls lock goroutines to
		// threads and let those threads die.
		runtime.LockOSThread()
		runWatchdog()
	}
	if len(os.Args) > 1 && os.Args[1] == SeccompProbeArg {
		runSeccompProbe()
	}
	dispatching.Store(true)
}

// watchdogConfig is what the watchdog needs to clean up after its owner,
// passed as JSON in os.Args[2].
type watchdogConfig struct {
	Owner      int      `json:"owner"`
	PidFD      bool     `json:"pidfd"` // fd 4 is the owner's pidfd
	SlotDir    string   `json:"slot_dir"`
	LockDir    string   `json:"lock_dir"`
	ParentDirs []string `json:"parent_dirs"`
	Verbose    bool     `json:"verbose"`
}

// The watchdog's inherited files, after stdin, stdout and stderr.
const (
	lifeFD  = 3 // read end of a pipe whose write end only the owner holds
	pidfdFD = 4 // the owner's pidfd, if cfg.PidFD
)

// watchdog is the owner's handle on its watchdog process.
type watchdog struct {
	cfg  watchdogConfig
	exe  string
	log  *slog.Logger
	stop chan struct{} // closed by close

	mu     sync.Mutex
	cur    *dogProc // the latest watchdog started
	closed bool
	wg     sync.WaitGroup // the async start and the reapers
}

// dogProc is one watchdog process.
type dogProc struct {
	cmd     *exec.Cmd
	life    *os.File // write end of its life pipe
	started time.Time
	exited  chan struct{}
}

func newWatchdog(cfg watchdogConfig, log *slog.Logger) *watchdog {
	return &watchdog{cfg: cfg, exe: "/proc/self/exe", log: log, stop: make(chan struct{})}
}

// startAsync starts the watchdog in the background, overlapping the rest of
// the Manager's set-up and the first sandbox's creation; the first ensure,
// just before that sandbox's init starts, waits for it.
func (w *watchdog) startAsync() {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.ensure(); err != nil && !errors.Is(err, box.ErrClosed) {
			w.log.Warn("starting the sandbox watchdog", "err", err)
		}
	}()
}

// ensure returns once a watchdog runs, starting one if none does.
func (w *watchdog) ensure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return box.ErrClosed
	}
	if w.cur != nil {
		select {
		case <-w.cur.exited:
		default:
			return nil
		}
		w.cur.life.Close()
		w.cur = nil
	}
	p, err := w.start()
	if err != nil {
		return fmt.Errorf("start sandbox watchdog: %w", err)
	}
	w.cur = p
	w.wg.Add(1)
	go w.reap(p)
	return nil
}

// start starts a watchdog process. Every file it gets but the two it is
// given is close-on-exec, so it holds no slot lock of its owner.
func (w *watchdog) start() (*dogProc, error) {
	if !dispatching.Load() {
		return nil, errNoDispatch
	}
	cfg := w.cfg
	// The pipe tells a watchdog on a kernel without pidfds (< 5.3) that
	// its owner is going.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer lifeR.Close()
	extra := []*os.File{lifeR}
	// Our own pidfd, handed over rather than opened by the watchdog from
	// a pid: a pid could be reused by the time the watchdog looks.
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		pidfd := os.NewFile(uintptr(fd), "pidfd")
		defer pidfd.Close()
		extra = append(extra, pidfd)
		cfg.PidFD = true
	}
	arg, err := json.Marshal(cfg)
	if err != nil {
		lifeW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        w.exe,
		Args:        []string{os.Args[0], WatchdogArg, string(arg)},
		Stderr:      os.Stderr, // a file: no copying goroutine, and its logs go where jaild's go
		ExtraFiles:  extra,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		lifeW.Close()
		return nil, err
	}
	return &dogProc{cmd: cmd, life: lifeW, started: time.Now(), exited: make(chan struct{})}, nil
}

// reap waits for p to exit and, unless the owner is closing, starts
// another: the owner's sandboxes are unguarded until then.
func (w *watchdog) reap(p *dogProc) {
	defer w.wg.Done()
	err := p.cmd.Wait()
	close(p.exited)
	select {
	case <-w.stop:
		return
	default:
	}
	w.log.Warn("sandbox watchdog exited; starting another", "pid", p.cmd.Process.Pid, "err", err)
	// One that dies at once would otherwise be restarted in a loop.
	if wait := time.Second - time.Since(p.started); wait > 0 {
		select {
		case <-w.stop:
			return
		case <-time.After(wait):
		}
	}
	if err := w.ensure(); err != nil && !errors.Is(err, box.ErrClosed) {
		w.log.Warn("restarting the sandbox watchdog", "err", err)
	}
}

// kill ends the watchdog, once every sandbox is gone, without waiting.
func (w *watchdog) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	close(w.stop)
	if w.cur != nil {
		_ = w.cur.cmd.Process.Kill() // ErrProcessDone if it died already
	}
}

// close kills the watchdog and waits until it is reaped.
func (w *watchdog) close() {
	w.kill()
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		<-p.exited
		p.life.Close()
	}
	w.wg.Wait()
}

// runWatchdog is the body of a Manager's watchdog process (see
// WatchdogArg). It never returns.
func runWatchdog() {
	// A terminal's Ctrl-C or hang-up, or a service manager's SIGTERM to
	// every process of jaild, must not end the watchdog before its owner:
	// the owner tells it when to go.
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGPIPE)
	var cfg watchdogConfig
	if len(os.Args) != 3 || json.Unmarshal([]byte(os.Args[2]), &cfg) != nil || cfg.Owner <= 0 || cfg.SlotDir == "" {
		fmt.Fprintln(os.Stderr, "jaild: watchdog: internal command, started by jaild itself")
		os.Exit(2)
	}
	level := slog.LevelWarn
	if cfg.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("watchdog_of", cfg.Owner)
	waitOwner(cfg, log)
	os.Exit(cleanUp(cfg, log))
}

// waitOwner returns once the owner has exited and closed its files.
func waitOwner(cfg watchdogConfig, log *slog.Logger) {
	fd := int32(lifeFD)
	if cfg.PidFD {
		fd = pidfdFD
	}
	fds := []unix.PollFd{{Fd: fd, Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			log.Warn("waiting for owner", "err", err)
			break
		}
	}
	if cfg.PidFD {
		return
	}
	// The life pipe's EOF comes as the owner's files are being closed: wait
	// until it is a zombie, whose files are all closed.
	for deadline := time.Now().Add(waitDelay); time.Now().Before(deadline) && alive(cfg.Owner); {
		time.Sleep(5 * time.Millisecond)
	}
}

// alive reports whether pid is a process that has not exited (a zombie has
// closed its files). Only for kernels without pidfds.
func alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i < 0 || !strings.HasPrefix(string(st[i+1:]), " Z")
}

// cleanUp sweeps the sandboxes of the dead owner and releases the parent
// cgroup if no one else uses it. It returns the exit code.
func cleanUp(cfg watchdogConfig, log *slog.Logger) int {
	m := &Manager{log: log}
	var err error
	// A sandbox whose teardown fails keeps its record; a second try
	// catches one that was still being torn down by a kernel under load.
	for try := 0; try < 3; try++ {
		var n int
		n, err = sweepSlots(cfg.SlotDir, func(r *record) bool { return r.Owner == cfg.Owner }, m.sweepRecord)
		if n > 0 {
			log.Info("owner died; swept orphaned sandboxes", "count", n)
		}
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		log.Warn("sweeping orphaned sandboxes", "err", err)
	}
	if rerr := cgroup.Release(cfg.LockDir, cfg.ParentDirs); rerr != nil {
		log.Warn("releasing the parent cgroup", "err", rerr)
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return 1
	}
	return 0
}
