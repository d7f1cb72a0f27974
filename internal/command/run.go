package command

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"

	"github.com/docker/go-units"
	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/jail"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// RunOptions are what a binary gives its run command.
type RunOptions struct {
	// Egress gives a one-shot run's spec the proxy of the egress flags,
	// served in this process (jaild-server's). Nil: the binary has no
	// proxy (the lean jaild leaves out net/http, which the proxy needs).
	Egress func(c *cli.Context, spec *jail.Spec) error
	// Delegate, if not nil, replaces the process with the complete
	// binary's COMMAND ARGS... (the lean jaild's: jaild-server). Without
	// Egress, a run that asks for egress is handed to it.
	Delegate func(command string, args []string) error
}

// Run is the run command, one command in a fresh sandbox, with o.
func Run(o RunOptions) *cli.Command {
	cmd := runCommand
	cmd.Action = func(c *cli.Context) error { return runAction(c, o) }
	return &cmd
}

// runCommand is the run command but its action, which Run adds.
var runCommand = cli.Command{
	Name:      "run",
	Usage:     "run one command in a fresh sandbox and exit with its exit code",
	ArgsUsage: "-- COMMAND [ARG...]",
	Description: `Runs COMMAND (argv, no shell) or --shell STRING (/bin/sh -c STRING) in a new
sandbox, prints its stdout and stderr, and exits with its exit code. Exit codes
of jaild itself: 119 internal error, 120 not root, 121 host lacks support,
122 rootfs error, 123 OOM-killed, 124 timed out, 125 bad usage or input,
126 command not executable, 127 command not found; a command killed by
signal N exits 128+N, and so does jaild run itself when signal N interrupts
it (after removing the sandbox). --json prints the whole result instead of
the output. --egress-allow gives the sandbox network access to those
destinations only, through jaild's proxy (see docs/egress.md).
Sizes take a unit: 512K, 256M, 1G (binary multiples).`,
	Flags: append([]cli.Flag{
		&cli.DurationFlag{Name: "timeout", Value: box.DefaultTimeout, EnvVars: []string{"JAILD_TIMEOUT"}, Usage: "wall-clock limit; the sandbox is killed when it expires"},
		&cli.StringFlag{Name: "memory", Value: Size(box.DefaultMemory), EnvVars: []string{"JAILD_MEMORY"}, Usage: "memory limit, no swap (tmpfs pages count too)"},
		&cli.Int64Flag{Name: "pids", Value: box.DefaultPids, EnvVars: []string{"JAILD_PIDS"}, Usage: "maximum processes and threads"},
		&cli.Float64Flag{Name: "cpus", Value: box.DefaultCPUs, EnvVars: []string{"JAILD_CPUS"}, Usage: "CPU quota in cores"},
		&cli.StringFlag{Name: "tmpfs-size", Value: Size(box.DefaultTmpfsSize), EnvVars: []string{"JAILD_TMPFS_SIZE"}, Usage: "size cap of each of the working directory and /tmp"},
		&cli.StringSliceFlag{Name: "env", EnvVars: []string{"JAILD_ENV"}, Usage: "set KEY=VALUE in the command's environment (repeatable)"},
		&cli.StringFlag{Name: "cwd", EnvVars: []string{"JAILD_CWD"}, Usage: "where the command starts: the working directory (--sandbox-workdir), /tmp or below them (default: the working directory)"},
		&cli.StringFlag{Name: "stdin", EnvVars: []string{"JAILD_STDIN"}, Usage: "file to feed as stdin, - for jaild's own stdin; default /dev/null"},
		&cli.StringFlag{Name: "max-output", Value: Size(box.DefaultMaxOutput), EnvVars: []string{"JAILD_MAX_OUTPUT"}, Usage: "bytes of each stream to keep; beyond it head and tail are kept with a marker"},
		&cli.BoolFlag{Name: "json", EnvVars: []string{"JAILD_JSON"}, Usage: "print the result as JSON instead of the output"},
		&cli.StringFlag{Name: "shell", Usage: "run this string with /bin/sh -c instead of COMMAND"},
	}, append(ManagerFlags, EgressFlags...)...),
	OnUsageError: OnUsageError,
}

// OnUsageError makes a flag error one line and exit code exitUsage, instead
// of urfave/cli's full help text.
func OnUsageError(_ *cli.Context, err error, _ bool) error {
	return UsageError("%v (see --help)", err)
}

// ManagerFlags configure the jail.Manager; every command that builds
// sandboxes shares them.
var ManagerFlags = []cli.Flag{
	&cli.StringFlag{Name: "rootfs", Value: "host", EnvVars: []string{"JAILD_ROOTFS"}, Usage: `root file system: "host" (read-only template over the host's /usr) or a prepared DIR, which must have the working directory's mount point`},
	SandboxWorkDirFlag,
	&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir, EnvVars: []string{"JAILD_STATE_DIR"}, Usage: "where container state and the rootfs template live"},
	&cli.StringFlag{Name: "cgroup-parent", EnvVars: []string{"JAILD_CGROUP_PARENT"}, Usage: "parent cgroup of all sandboxes (default: automatic, see jaild doctor)"},
	&cli.StringFlag{Name: "total-memory", EnvVars: []string{"JAILD_TOTAL_MEMORY"}, Usage: "memory budget of all sandboxes together (default half the host's)"},
	&cli.Int64Flag{Name: "total-pids", EnvVars: []string{"JAILD_TOTAL_PIDS"}, Usage: "pids budget of all sandboxes together (default 16384)"},
	&cli.Float64Flag{Name: "total-cpus", EnvVars: []string{"JAILD_TOTAL_CPUS"}, Usage: "CPU budget of all sandboxes together (default all)"},
	&cli.IntFlag{Name: "teardown-backlog", Value: jail.DefaultTeardownBacklog, EnvVars: []string{"JAILD_TEARDOWN_BACKLOG"}, Usage: "finished sandboxes destroyed after their answer, at most; beyond it the answer waits for its teardown (0: always)"},
	&cli.BoolFlag{Name: "debug", EnvVars: []string{"JAILD_DEBUG"}, Usage: "log debug messages to stderr"},
}

// SandboxWorkDirFlag is the sandboxes' working directory: every command
// that builds sandboxes or describes them (the front ends) takes it.
var SandboxWorkDirFlag = &cli.StringFlag{Name: "sandbox-workdir", Value: box.DefaultDir, EnvVars: []string{"JAILD_SANDBOX_WORKDIR"},
	Usage: "the sandbox's working directory: its writable tmpfs (a session's workspace), default cwd and HOME, e.g. /workspace"}

// SandboxWorkDir reads --sandbox-workdir, valid (see jail.ValidateWorkDir).
func SandboxWorkDir(c *cli.Context) (string, error) {
	wd := c.String("sandbox-workdir")
	if wd == "" {
		wd = box.DefaultDir
	}
	if err := jail.ValidateWorkDir(wd); err != nil {
		return "", UsageError("--sandbox-workdir: %v", err)
	}
	return wd, nil
}

// NewManager builds the Manager of the manager flags. Its log goes to log,
// or, if nil, to stderr as text, warnings only unless --debug.
func NewManager(c *cli.Context, log *slog.Logger) (*jail.Manager, error) {
	m, err := newManager(c, log)
	var ec cli.ExitCoder
	if err != nil && !errors.As(err, &ec) {
		return nil, ExitError(err)
	}
	return m, err
}

// newManager is NewManager with the Manager's own error, not its exit.
func newManager(c *cli.Context, log *slog.Logger) (*jail.Manager, error) {
	total, err := SizeFlag(c, "total-memory")
	if err != nil {
		return nil, err
	}
	backlog := c.Int("teardown-backlog")
	switch {
	case backlog < 0:
		return nil, UsageError("--teardown-backlog %d: must not be negative", backlog)
	case backlog == 0:
		backlog = -1 // jail.Config's "none"
	}
	workDir, err := SandboxWorkDir(c)
	if err != nil {
		return nil, err
	}
	// The worker's flag (serve's and mcp's --session-prestart-idle); jaild
	// run has none, and makes no workspaces.
	idle := c.Duration("session-prestart-idle")
	switch {
	case idle < 0:
		return nil, UsageError("--session-prestart-idle %v: must not be negative", idle)
	case idle == 0:
		idle = -1 // jail.Config's "never"
	}
	builds := c.Int("session-prestart-builds") // the worker's too; 0: the default
	if builds < 0 {
		return nil, UsageError("--session-prestart-builds %d: must not be negative", builds)
	}
	if log == nil {
		log = QuietLogger(c)
	}
	m, err := jail.New(jail.Config{
		StateDir:     c.String("state-dir"),
		Rootfs:       c.String("rootfs"),
		WorkDir:      workDir,
		CgroupParent: c.String("cgroup-parent"),
		Budget:       cgroup.Budget{Memory: total, Pids: c.Int64("total-pids"), CPUs: c.Float64("total-cpus")},
		// A one-shot run keeps the budget of a parent it finds (a
		// daemon's, say) unless it was given one.
		KeepBudget:      c.Command.Name == "run" && !c.IsSet("total-memory") && !c.IsSet("total-pids") && !c.IsSet("total-cpus"),
		TeardownBacklog: backlog,
		PrestartIdle:    idle,
		PrestartBuilds:  builds,
		Logger:          log,
		// The worker's and doctor's flag; jaild run has none: "", the
		// default.
		WorkspaceRoot: c.String("workspace-root"),
		PrivateMounts: privateMounts(c, log),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Size writes n as a size flag takes it, in the largest unit that divides
// it: Size(256<<20) is "256M".
func Size(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// SizeFlag parses a size flag such as "256M"; an empty flag is 0.
func SizeFlag(c *cli.Context, name string) (int64, error) {
	s := c.String(name)
	if s == "" {
		return 0, nil
	}
	n, err := units.RAMInBytes(s)
	if err != nil || n < 0 {
		return 0, UsageError("--%s %q: not a size (e.g. 512K, 256M, 1G)", name, s)
	}
	return n, nil
}

// LimitFlags reads a sandbox's limits from the flags prefix+"memory",
// prefix+"tmpfs-size", prefix+"pids" and prefix+"cpus", and its output cap
// from "max-output": run and mcp read the limits their sandboxes get (prefix
// ""), serve the ceilings of what a request may ask for ("max-"). Each must
// be positive and within jail's bounds.
func LimitFlags(c *cli.Context, prefix string) (l box.Limits, maxOutput int64, err error) {
	if l.Memory, err = SizeFlag(c, prefix+"memory"); err != nil {
		return l, 0, err
	}
	if l.TmpfsSize, err = SizeFlag(c, prefix+"tmpfs-size"); err != nil {
		return l, 0, err
	}
	if maxOutput, err = SizeFlag(c, "max-output"); err != nil {
		return l, 0, err
	}
	l.Pids = c.Int64(prefix + "pids")
	l.CPUs = c.Float64(prefix + "cpus")
	for _, f := range []struct {
		name     string
		positive bool
	}{
		{prefix + "memory", l.Memory > 0},
		{prefix + "tmpfs-size", l.TmpfsSize > 0},
		{prefix + "pids", l.Pids > 0},
		{prefix + "cpus", l.CPUs > 0},
		{"max-output", maxOutput > 0},
	} {
		if !f.positive {
			return l, 0, UsageError("--%s must be positive", f.name)
		}
	}
	if err := l.Validate(); err != nil {
		if prefix != "" {
			return l, 0, UsageError("--%s*: %v", prefix, err)
		}
		return l, 0, UsageError("%v", err)
	}
	return l, maxOutput, nil
}

func runAction(c *cli.Context, o RunOptions) error {
	if wantsEgress(c) && o.Egress == nil && o.Delegate != nil {
		// The proxy lives in jaild-server (see EgressFlags).
		return o.Delegate("run", runArgs())
	}
	spec, closeStdin, err := specFromFlags(c)
	if err != nil {
		return err
	}
	defer closeStdin()
	if wantsEgress(c) {
		if o.Egress == nil {
			return UsageError("--egress-allow: this jaild has no egress proxy; run it with jaild-server")
		}
		if err := o.Egress(c, spec); err != nil {
			return err
		}
	}
	if err := spec.Validate(); err != nil {
		return ExitError(err)
	}
	// SIGINT, SIGTERM and SIGHUP cancel the run: the sandbox is killed and
	// torn down before jaild exits, with 128+N like a shell. They are
	// caught from here on, so that one arriving while the parent cgroup is
	// set up cannot leave it half-made.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigc)
	var caught atomic.Value // unix.Signal
	go func() {
		select {
		case sig := <-sigc:
			caught.Store(sig)
			cancel()
		case <-ctx.Done():
		}
	}()

	forSandboxInits()
	m, err := NewManager(c, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	res, err := m.Run(ctx, spec)
	if sig, ok := caught.Load().(unix.Signal); ok && err != nil {
		if res == nil {
			return cli.Exit("", 128+int(sig))
		}
		err = signalError{sig}
	}
	if err != nil && res == nil {
		return ExitError(err)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(api.ResponseOf(res))
	} else {
		_, _ = io.WriteString(os.Stdout, res.Stdout)
		_, _ = io.WriteString(os.Stderr, res.Stderr)
	}
	var se signalError
	if errors.As(err, &se) {
		return cli.Exit("", 128+int(se.sig))
	}
	if err != nil {
		return ExitError(err)
	}
	if code := ResultCode(res); code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// specFromFlags turns run's flags and arguments into a Spec.
func specFromFlags(c *cli.Context) (*jail.Spec, func(), error) {
	noop := func() {}
	spec := &jail.Spec{}
	var err error
	if spec.Limits, spec.MaxOutput, err = LimitFlags(c, ""); err != nil {
		return nil, noop, err
	}
	spec.Timeout = c.Duration("timeout")
	if spec.Timeout <= 0 {
		return nil, noop, UsageError("--timeout must be positive")
	}
	spec.Env = c.StringSlice("env")
	spec.Dir = c.String("cwd")

	switch sh, args := c.String("shell"), c.Args().Slice(); {
	case sh != "" && len(args) > 0:
		return nil, noop, UsageError("give either --shell STRING or -- COMMAND, not both")
	case c.IsSet("shell"):
		if sh == "" {
			return nil, noop, UsageError("--shell: empty command")
		}
		spec.Args = []string{"/bin/sh", "-c", sh}
	case len(args) == 0:
		return nil, noop, UsageError("missing command: jaild run [flags] -- COMMAND [ARG...]")
	default:
		spec.Args = args
	}

	switch in := c.String("stdin"); in {
	case "":
	case "-":
		spec.Stdin = os.Stdin
	default:
		f, err := os.Open(in)
		if err != nil {
			return nil, noop, UsageError("--stdin: %v", err)
		}
		spec.Stdin = f
		return spec, func() { f.Close() }, nil
	}
	return spec, noop, nil
}

// signalError reports a run cancelled by a signal to jaild.
type signalError struct{ sig unix.Signal }

func (e signalError) Error() string { return "cancelled by " + unix.SignalName(e.sig) }
