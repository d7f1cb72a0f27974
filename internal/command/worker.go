package command

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/worker"
	"github.com/jaild/jaild/jail"
)

// Worker is the hidden worker command of the lean jaild, which jaild serve
// and jaild mcp start (see package worker): it owns the Manager, the pool
// and the periodic sweep and runs the front end's sandboxes, so that every
// sandbox's init is the lean binary. Its flags are set by WorkerArgs.
var Worker = &cli.Command{
	Name:   "worker",
	Usage:  "run sandboxes for jaild serve or jaild mcp (started by them)",
	Hidden: true,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: `"text" or "json"`},
		&cli.IntFlag{Name: "pool", Usage: "sandboxes kept started ahead of time (0: none)"},
		&cli.StringFlag{Name: "pool-memory", Usage: "memory limit of the pool's sandboxes"},
		&cli.Int64Flag{Name: "pool-pids", Usage: "pids limit of the pool's sandboxes"},
		&cli.Float64Flag{Name: "pool-cpus", Usage: "CPU quota of the pool's sandboxes"},
		&cli.StringFlag{Name: "pool-tmpfs-size", Usage: "tmpfs size of the pool's sandboxes"},
		&cli.DurationFlag{Name: "sweep-interval", Usage: "how often to sweep orphaned sandboxes (0: only at start)"},
		&cli.StringFlag{Name: "cpu-profile", Usage: "write a CPU profile of the worker's life to this file at exit"},
		&cli.StringFlag{Name: "workspace-root", Usage: "where session workspaces are mounted (empty: <state-dir>/workspaces)"},
		&cli.DurationFlag{Name: "session-prestart-idle", Usage: "idle time after which a workspace's prestarted sandboxes are destroyed (0: never)"},
		&cli.IntFlag{Name: "session-prestart-builds", Usage: "workspaces' prestarted sandboxes built at once while no run waits for them (0: half of GOMAXPROCS, at least one)"},
		&cli.BoolFlag{Name: "private-mounts", Usage: "this process was started in a mount namespace of its own (jail.Config.PrivateMounts)"},
		&cli.BoolFlag{Name: "default-gomaxprocs", Usage: "size this process's Go runtime as if GOMAXPROCS were unset: the GOMAXPROCS of its environment is the sandboxes' inits' (see BuilderEnv)"},
	}, ManagerFlags...),
	Action:       workerAction,
	OnUsageError: OnUsageError,
}

// WorkerOptions are what a front end tells its worker besides the manager
// flags.
type WorkerOptions struct {
	// LogFormat is the worker's log format, "text" or "json".
	LogFormat string
	// Pool is how many sandboxes of PoolLimits the worker keeps started.
	Pool       int
	PoolLimits box.Limits
	// PrestartIdle is how long a workspace keeps its prestarted sandbox
	// without a run (jail.Config.PrestartIdle); zero: for ever.
	PrestartIdle time.Duration
	// PrestartBuilds is how many workspaces' prestarted sandboxes are
	// built at once while no run waits for them
	// (jail.Config.PrestartBuilds); zero: half of GOMAXPROCS.
	PrestartBuilds int
	// Sweep is how often the worker sweeps orphaned sandboxes; zero: only
	// at start.
	Sweep time.Duration
	// DefaultGOMAXPROCS: the worker's environment carries the inits'
	// GOMAXPROCS (BuilderEnv added it), and its own runtime is sized as if
	// it were unset.
	DefaultGOMAXPROCS bool
	// CPUProfile, if not empty, is the file the worker writes a CPU
	// profile of its life to.
	CPUProfile string
	// PrivateMounts: the worker is started in a mount namespace of its
	// own (worker.Config.PrivateMounts), and its Manager binds there
	// what every sandbox would (jail.Config.PrivateMounts). See
	// PrivateMounts.
	PrivateMounts bool
}

// PrivateMounts reports whether the worker of the front end's context c
// gets a mount namespace of its own: unless an operator's workspace root
// is given (jail.PrivateMountsWork), since it saves every sandbox's init
// its read-only binds.
func PrivateMounts(c *cli.Context) bool {
	return jail.PrivateMountsWork(c.String("workspace-root"))
}

// privateMounts reports whether the worker of context c has the mount
// namespace of its own its front end asked for (--private-mounts): the
// front end falls back to its own where the system forbids one.
func privateMounts(c *cli.Context, log *slog.Logger) bool {
	if !c.Bool("private-mounts") {
		return false
	}
	own, err := jail.OwnMountNamespace()
	if err != nil || !own {
		log.Warn("in the front end's mount namespace: every sandbox binds the host's /usr itself", "err", err)
		return false
	}
	return true
}

// WorkerArgs are the arguments of a worker for the front end's context c
// and o. Every manager flag is passed, so the worker's environment cannot
// override what the front end was told.
func WorkerArgs(c *cli.Context, o WorkerOptions) []string {
	l := o.PoolLimits
	args := []string{Worker.Name,
		"--log-format", o.LogFormat,
		"--pool", strconv.Itoa(o.Pool),
		"--pool-memory", strconv.FormatInt(l.Memory, 10),
		"--pool-pids", strconv.FormatInt(l.Pids, 10),
		"--pool-cpus", strconv.FormatFloat(l.CPUs, 'g', -1, 64),
		"--pool-tmpfs-size", strconv.FormatInt(l.TmpfsSize, 10),
		"--sweep-interval", o.Sweep.String(),
		"--session-prestart-idle", o.PrestartIdle.String(),
		"--session-prestart-builds", strconv.Itoa(o.PrestartBuilds),
		"--default-gomaxprocs=" + strconv.FormatBool(o.DefaultGOMAXPROCS),
		"--private-mounts=" + strconv.FormatBool(o.PrivateMounts),
		"--debug=" + strconv.FormatBool(c.Bool("debug")),
	}
	if o.CPUProfile != "" {
		args = append(args, "--cpu-profile", o.CPUProfile)
	}
	// workspace-root is serve's and mcp's (their session flags), not a
	// manager flag: jaild run makes no workspaces.
	for _, name := range []string{"rootfs", "sandbox-workdir", "state-dir", "cgroup-parent", "total-memory", "workspace-root"} {
		args = append(args, "--"+name, c.String(name))
	}
	args = append(args, "--total-pids", strconv.FormatInt(c.Int64("total-pids"), 10))
	args = append(args, "--total-cpus", strconv.FormatFloat(c.Float64("total-cpus"), 'g', -1, 64))
	args = append(args, "--teardown-backlog", strconv.Itoa(c.Int("teardown-backlog")))
	return args
}

// Logger is the daemon's log on stderr in format ("text" or "json"), at
// info level, or debug with debug.
func Logger(format string, debug bool) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if debug {
		opts.Level = slog.LevelDebug
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, UsageError("--log-format %q: want text or json", format)
}

// QuietLogger is a one-shot command's log on stderr: warnings only, or
// everything with --debug.
func QuietLogger(c *cli.Context) *slog.Logger {
	level := slog.LevelWarn
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// workerAction builds the Manager and the pool, tells the front end
// whether that worked, and serves it until it closes the connection.
func workerAction(c *cli.Context) error {
	if c.Bool("default-gomaxprocs") {
		runtime.SetDefaultGOMAXPROCS()
	}
	ctl, err := worker.Control()
	if err != nil {
		return cli.Exit(err.Error(), api.ExitInternal)
	}
	defer ctl.Close()
	// The front end decides when the worker stops: a signal meant for the
	// daemon (systemd sends SIGTERM to every process of the unit) is the
	// front end's to act on, and it closes the control connection in
	// time. Caught rather than ignored: an ignored signal would stay
	// ignored in the sandboxes' commands.
	signal.Notify(make(chan os.Signal, 1), unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	w, err := openWorker(c)
	if err != nil {
		if rerr := worker.Ready(ctl, err); rerr != nil {
			return cli.Exit(fmt.Sprintf("%v (and telling the front end: %v)", err, rerr), api.ExitInternal)
		}
		return cli.Exit("", api.ErrorOutcome(err).Exit) // the front end reports it
	}
	defer w.stopProfile()
	if err := worker.Ready(ctl, nil); err != nil {
		_ = w.close()
		return cli.Exit(fmt.Sprintf("tell the front end the worker is ready: %v", err), api.ExitInternal)
	}
	w.log.Debug("worker ready", "gomaxprocs", runtime.GOMAXPROCS(0), "pool", c.Int("pool"))

	// A one-shot jaild run that is killed while the daemon runs leaves an
	// orphan that no restart will find soon; sweep for such orphans now
	// and then, not only at start.
	stopSweep := w.sweepEvery(c.Duration("sweep-interval"))
	// Until the front end closes the connection or dies.
	serr := worker.Serve(c.Context, ctl, w.base(), w.newWorkspace, w.log)
	stopSweep()
	if err := w.close(); err != nil {
		return cli.Exit(fmt.Sprintf("clean up sandboxes: %v", err), api.ExitInternal)
	}
	if serr != nil {
		return cli.Exit(serr.Error(), api.ExitInternal)
	}
	return nil
}

// openedWorker is what a worker serves with: the Manager, and the pool in
// front of it if --pool asks for one.
type openedWorker struct {
	log         *slog.Logger
	m           *jail.Manager
	pool        *jail.Pool
	stopProfile func()
}

// openWorker reads the worker's flags, starts the CPU profile if asked,
// and builds the Manager and the pool. On an error nothing is left open.
func openWorker(c *cli.Context) (_ *openedWorker, err error) {
	w := &openedWorker{stopProfile: func() {}}
	if w.log, err = Logger(c.String("log-format"), c.Bool("debug")); err != nil {
		return nil, err
	}
	w.log = w.log.With("proc", "worker")
	var l box.Limits
	if l.Memory, err = SizeFlag(c, "pool-memory"); err != nil {
		return nil, err
	}
	if l.TmpfsSize, err = SizeFlag(c, "pool-tmpfs-size"); err != nil {
		return nil, err
	}
	l.Pids, l.CPUs = c.Int64("pool-pids"), c.Float64("pool-cpus")
	if f := c.String("cpu-profile"); f != "" {
		if w.stopProfile, err = cpuProfile(f); err != nil {
			return nil, err
		}
	}
	if w.m, err = newManager(c, w.log); err != nil {
		w.stopProfile()
		return nil, err
	}
	if n := c.Int("pool"); n > 0 {
		if w.pool, err = w.m.NewPool(n, l); err != nil {
			_ = w.m.Close()
			w.stopProfile()
			return nil, err
		}
	}
	return w, nil
}

// base runs the one-shot sandboxes: the pool's, or new ones.
func (w *openedWorker) base() worker.Runner {
	if w.pool != nil {
		return w.pool
	}
	return w.m
}

// newWorkspace makes a session's workspace of size bytes.
func (w *openedWorker) newWorkspace(size int64, proxy bool, prestart *box.Limits) (worker.Workspace, error) {
	var opts []jail.WorkspaceOption
	if proxy {
		opts = append(opts, jail.WithProxy())
	}
	if prestart != nil {
		opts = append(opts, jail.WithPrestart(*prestart))
	}
	ws, err := w.m.NewWorkspace(size, opts...)
	if err != nil {
		return nil, err
	}
	return ws, nil
}

// sweepEvery sweeps orphaned sandboxes every d (never if d is not
// positive) until the returned stop is called, which waits for a sweep
// under way.
func (w *openedWorker) sweepEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if d <= 0 {
			return
		}
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if n, err := w.m.Sweep(); err != nil {
					w.log.Warn("sweeping orphaned sandboxes", "found", n, "err", err)
				} else if n > 0 {
					w.log.Info("swept orphaned sandboxes", "count", n)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// close closes the pool, then the Manager, which waits until every
// sandbox is torn down.
func (w *openedWorker) close() error {
	if w.pool != nil {
		_ = w.pool.Close()
	}
	return w.m.Close()
}

// cpuProfile starts profiling the worker's CPU into file and returns what
// stops it and closes the file.
func cpuProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
