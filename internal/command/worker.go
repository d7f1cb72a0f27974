package command

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
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
	}, ManagerFlags...),
	Action:       workerAction,
	OnUsageError: OnUsageError,
}

// WorkerArgs are the arguments of a worker for the front end's context c:
// its manager flags, its log format, its pool of size pool with limits l,
// and how often it sweeps. Every manager flag is passed, so the worker's
// environment cannot override what the front end was told.
func WorkerArgs(c *cli.Context, logFormat string, pool int, l box.Limits, sweep time.Duration) []string {
	args := []string{Worker.Name,
		"--log-format", logFormat,
		"--pool", strconv.Itoa(pool),
		"--pool-memory", strconv.FormatInt(l.Memory, 10),
		"--pool-pids", strconv.FormatInt(l.Pids, 10),
		"--pool-cpus", strconv.FormatFloat(l.CPUs, 'g', -1, 64),
		"--pool-tmpfs-size", strconv.FormatInt(l.TmpfsSize, 10),
		"--sweep-interval", sweep.String(),
		"--debug=" + strconv.FormatBool(c.Bool("debug")),
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

func workerAction(c *cli.Context) error {
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
	log, err := Logger(c.String("log-format"), c.Bool("debug"))
	if err == nil {
		log = log.With("proc", "worker")
	}
	if err == nil && c.String("cpu-profile") != "" {
		var stop func()
		if stop, err = cpuProfile(c.String("cpu-profile")); err == nil {
			defer stop()
		}
	}
	var m *jail.Manager
	if err == nil {
		m, err = newManager(c, log)
	}
	var base worker.Runner = m
	var pool *jail.Pool
	if err == nil && c.Int("pool") > 0 {
		var l box.Limits
		if l.Memory, err = SizeFlag(c, "pool-memory"); err == nil {
			l.TmpfsSize, err = SizeFlag(c, "pool-tmpfs-size")
		}
		l.Pids, l.CPUs = c.Int64("pool-pids"), c.Float64("pool-cpus")
		if err == nil {
			pool, err = m.NewPool(c.Int("pool"), l)
		}
		if err == nil {
			base = pool
		}
	}
	if err != nil {
		if m != nil {
			_ = m.Close()
		}
		if rerr := worker.Ready(ctl, err); rerr != nil {
			return cli.Exit(fmt.Sprintf("%v (and telling the front end: %v)", err, rerr), api.ExitInternal)
		}
		return cli.Exit("", api.ErrorOutcome(err).Exit) // the front end reports it
	}
	if err := worker.Ready(ctl, nil); err != nil {
		_ = m.Close()
		return cli.Exit(fmt.Sprintf("tell the front end the worker is ready: %v", err), api.ExitInternal)
	}

	// A one-shot jaild run that is killed while the daemon runs leaves an
	// orphan that no restart will find soon; sweep for such orphans now
	// and then, not only at start.
	sweepDone := make(chan struct{})
	sweepStopped := make(chan struct{})
	go func() {
		defer close(sweepStopped)
		d := c.Duration("sweep-interval")
		if d <= 0 {
			return
		}
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if n, err := m.Sweep(); err != nil {
					log.Warn("sweeping orphaned sandboxes", "found", n, "err", err)
				} else if n > 0 {
					log.Info("swept orphaned sandboxes", "count", n)
				}
			case <-sweepDone:
				return
			}
		}
	}()

	// Until the front end closes the connection or dies.
	serr := worker.Serve(c.Context, ctl, base, func(size int64, proxy bool, prestart *box.Limits) (worker.Workspace, error) {
		var opts []jail.WorkspaceOption
		if proxy {
			opts = append(opts, jail.WithProxy())
		}
		if prestart != nil {
			opts = append(opts, jail.WithPrestart(*prestart))
		}
		ws, err := m.NewWorkspace(size, opts...)
		if err != nil {
			return nil, err
		}
		return ws, nil
	}, log)
	close(sweepDone)
	<-sweepStopped
	if pool != nil {
		_ = pool.Close()
	}
	if err := m.Close(); err != nil {
		return cli.Exit(fmt.Sprintf("clean up sandboxes: %v", err), api.ExitInternal)
	}
	if serr != nil {
		return cli.Exit(serr.Error(), api.ExitInternal)
	}
	return nil
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
