package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/worker"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
	"github.com/jaild/jaild/session"
)

// serve and mcp are one daemon behind two transports: HTTP (with MCP at
// /mcp) and MCP over stdio. They share daemonFlags, read by
// readDaemonConfig, and openDaemon, which builds the worker and the run
// chain's parts as a server.Config; each command adds only its own flags
// and its transport. Every flag is checked before anything is built, and a
// bad one exits api.ExitUsage; what fails after that exits with its
// error's outcome (command.ExitError).

// daemonFlags are serve's and mcp's flags alike: one name, default,
// environment variable and help each.
var daemonFlags = slices.Concat([]cli.Flag{
	&cli.StringFlag{Name: "config", EnvVars: []string{"JAILD_CONFIG"}, Usage: `config file of "flag-name = value" lines`},
	&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"JAILD_LOG_FORMAT"}, Usage: `format of the daemon's log on stderr: "text" or "json"`},
	&cli.DurationFlag{Name: "max-timeout", Value: 10 * time.Minute, EnvVars: []string{"JAILD_MAX_TIMEOUT"}, Usage: "longest timeout a request may ask for (default timeout: " + box.DefaultTimeout.String() + " or this, if lower); an MCP tool call's is at most " + server.MaxMCPTimeout.String()},
	&cli.StringFlag{Name: "max-output", Value: "16M", EnvVars: []string{"JAILD_MAX_OUTPUT"}, Usage: "most output per stream a run may keep, in bytes: the most a request may ask for; the MCP tools keep --mcp-max-output characters of it, run_network_tool up to 1 MiB"},
	&cli.IntFlag{Name: "max-concurrent", Value: run.DefaultMaxConcurrent, EnvVars: []string{"JAILD_MAX_CONCURRENT"}, Usage: "sandboxes running at once; further requests and tool calls wait in the queue"},
	&cli.IntFlag{Name: "pool", Value: 2, EnvVars: []string{"JAILD_POOL"}, Usage: "sandboxes kept started ahead of time for runs with the default limits, so that they do not wait for one to be built (0: none)"},
	&cli.IntFlag{Name: "queue", Aliases: []string{"max-queue"}, Value: 64, EnvVars: []string{"JAILD_QUEUE", "JAILD_MAX_QUEUE"}, Usage: `requests and tool calls that may wait for a sandbox; beyond it 429 at once (an MCP tool call: "busy")`},
	&cli.DurationFlag{Name: "queue-wait", Value: run.DefaultQueueWait, EnvVars: []string{"JAILD_QUEUE_WAIT"}, Usage: `how long a request or tool call waits for a sandbox before 429 (an MCP tool call: "busy")`},
	&cli.StringFlag{Name: "max-output-memory", Value: "64M", EnvVars: []string{"JAILD_MAX_OUTPUT_MEMORY"}, Usage: "memory the output of all running requests may take (each holds twice its max output until answered); beyond it requests queue"},
	&cli.StringFlag{Name: "audit-log", Value: "-", EnvVars: []string{"JAILD_AUDIT_LOG"}, Usage: `file to append one JSON line per run to; "-" is stderr, "off" none`},
	&cli.BoolFlag{Name: "audit-command", EnvVars: []string{"JAILD_AUDIT_COMMAND"}, Usage: "put each run's command in the audit log, not only its SHA-256"},
	&cli.StringFlag{Name: "shell-path", Value: "/bin/bash", EnvVars: []string{"JAILD_SHELL_PATH"}, Usage: "shell inside the sandbox that runs the MCP bash tool's command lines (with -c)"},
	mcpToolsFlag(),
	&cli.StringFlag{Name: "mcp-max-output", Value: fmt.Sprint(server.DefaultMCPMaxOutput), EnvVars: []string{"JAILD_MCP_MAX_OUTPUT", "MCP_EXEC_MAX_OUTPUT_BYTES"}, Usage: "characters of each stream an MCP bash or execute result keeps (MCP_EXEC_MAX_OUTPUT_BYTES is read as characters too), at most a quarter of --max-output (bytes: a character takes up to 4); beyond it head and tail are kept with a marker"},
}, policyFlags, sessionFlags, []cli.Flag{mcpSessionFlag}, command.EgressFlags, command.DaemonEgressFlags, command.ManagerFlags, profileFlags)

// sweepInterval is how often the daemon's worker looks for sandboxes whose
// jaild died while it runs.
const sweepInterval = time.Minute

// limitFlags says what a command's sandbox limit flags are.
type limitFlags int

const (
	// ceilingFlags are serve's --max-memory, --max-pids, --max-cpus and
	// --max-tmpfs-size: the most a request may ask for. One that asks
	// for none gets the jail's defaults under them.
	ceilingFlags limitFlags = iota
	// sandboxFlags are mcp's --memory, --pids, --cpus and --tmpfs-size:
	// the limits of every tool call, which asks for none, and so the
	// most any run gets.
	sandboxFlags
)

// daemonConfig is the daemon that daemonFlags describe, read and checked.
type daemonConfig struct {
	log       *slog.Logger
	logFormat string
	max       run.Maxima
	// defaults are the limits of a run that asks for none: the pool's
	// sandboxes are built with them, and every MCP tool call gets them.
	defaults  box.Limits
	pool      int
	admission run.AdmitOptions
	sessions  session.Config
	// mcp, if not nil, serves the MCP tools (mcp always, serve unless
	// --mcp=false); mcpSessions gives each MCP session a jaild session.
	mcp         *server.MCPOptions
	mcpSessions bool
	// policy, if not nil, decides every run.
	policy *policy.Options
	egress run.EgressOptions
	proxy  egress.Config
	// prestartIdle is --session-prestart-idle, the worker's (0: never).
	prestartIdle time.Duration
	// prestartBuilds is --session-prestart-builds, the worker's (0:
	// half of its GOMAXPROCS).
	prestartBuilds int
}

// readDaemonConfig reads daemonFlags, after the --config file, and the
// command's limit flags of kind limits.
func readDaemonConfig(c *cli.Context, limits limitFlags) (daemonConfig, error) {
	var d daemonConfig
	if path := c.String("config"); path != "" {
		if err := applyConfigFile(c, path); err != nil {
			return d, command.UsageError("%v", err)
		}
	}
	var err error
	d.logFormat = c.String("log-format")
	if d.log, err = command.Logger(d.logFormat, c.Bool("debug")); err != nil {
		return d, err
	}
	if d.max, d.defaults, err = readMaxima(c, limits); err != nil {
		return d, err
	}
	if d.pool = c.Int("pool"); d.pool < 0 {
		return d, command.UsageError("--pool %d: must not be negative", d.pool)
	}
	if d.prestartIdle = c.Duration("session-prestart-idle"); d.prestartIdle < 0 {
		return d, command.UsageError("--session-prestart-idle %v: must not be negative", d.prestartIdle)
	}
	if d.prestartBuilds = c.Int("session-prestart-builds"); d.prestartBuilds < 0 {
		return d, command.UsageError("--session-prestart-builds %d: must not be negative", d.prestartBuilds)
	}
	if _, err := command.SizeFlag(c, "total-memory"); err != nil {
		return d, err // the worker's, checked before it starts
	}
	if d.admission, err = admitOptions(c, d.max.MaxOutput); err != nil {
		return d, err
	}
	if d.sessions, err = sessionConfig(c, d.log); err != nil {
		return d, err
	}
	if d.mcpSessions, err = mcpSessionsOn(c); err != nil {
		return d, err
	}
	mcp, err := readMCPOptions(c, d.max, d.log)
	if err != nil {
		return d, err
	}
	d.mcp = &mcp
	if d.policy, err = readPolicyOptions(c, d.log); err != nil {
		return d, err
	}
	if d.egress, d.proxy, err = daemonEgressFlags(c, d.log); err != nil {
		return d, err
	}
	return d, nil
}

// readMaxima reads the most a run may get: the command's limit flags of
// kind limits, --max-timeout and --max-output. defaults are what a run
// that asks for nothing gets.
func readMaxima(c *cli.Context, limits limitFlags) (max run.Maxima, defaults box.Limits, err error) {
	prefix := "max-"
	if limits == sandboxFlags {
		prefix = ""
	}
	if max.Limits, max.MaxOutput, err = command.LimitFlags(c, prefix); err != nil {
		return max, defaults, err
	}
	max.Timeout = c.Duration("max-timeout")
	if max.Timeout <= 0 {
		return max, defaults, command.UsageError("--max-timeout must be positive")
	}
	if max.Timeout > box.MaxTimeout {
		return max, defaults, command.UsageError("--max-timeout %v: at most %v", max.Timeout, box.MaxTimeout)
	}
	if limits == sandboxFlags {
		// jaild mcp's flags are each sandbox's limits.
		max.DefaultLimits = max.Limits
		return max, max.Limits, nil
	}
	defaults, _, _ = max.Defaults()
	return max, defaults, nil
}

// readMCPOptions reads the MCP tools' flags. A tool call asks for no
// limits and gets the chain's defaults, as an HTTP request that asks for
// none; max, the chain's maxima, tell the tools' descriptions what they are.
func readMCPOptions(c *cli.Context, max run.Maxima, log *slog.Logger) (server.MCPOptions, error) {
	tools, err := mcpTools(c)
	if err != nil {
		return server.MCPOptions{}, err
	}
	maxOutput, err := command.SizeFlag(c, "mcp-max-output")
	if err != nil {
		return server.MCPOptions{}, err
	}
	if maxOutput <= 0 {
		return server.MCPOptions{}, command.UsageError("--mcp-max-output must be positive")
	}
	workDir, err := command.SandboxWorkDir(c)
	if err != nil {
		return server.MCPOptions{}, err
	}
	return server.MCPOptions{
		WorkDir:   workDir,
		Max:       max,
		MaxOutput: maxOutput,
		Shell:     c.String("shell-path"),
		Tools:     tools,
		Egress:    c.Bool("mcp-egress"),
		Logger:    log.With("front", "mcp"),
	}, nil
}

// daemon is a started daemon: its worker, which builds the sandboxes, and
// the parts of the run chain over it, wired as a server.Config. Serve it
// with its Run (HTTP) or its Runner (stdio), then Close it.
type daemon struct {
	server.Config
	log                                *slog.Logger
	worker                             *worker.Client
	stopPprof, closeAudit, closePolicy func()
}

// openDaemon starts the daemon of cfg: the profiles' listener, the audit
// log, the worker, the policy engine, the egress proxy and the sessions.
// metrics, if not nil, record the policy's decisions (serve's /metrics).
// On an error what was started is closed again.
func openDaemon(c *cli.Context, cfg daemonConfig, metrics *run.Metrics) (_ *daemon, err error) {
	d := &daemon{log: cfg.log}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	limitHeap(cfg.admission.MaxOutputMemory)
	if d.stopPprof, err = startPprof(c, cfg.log); err != nil {
		return nil, err
	}
	audit, closeAudit, err := openAudit(c, cfg.log)
	if err != nil {
		return nil, err
	}
	d.closeAudit = closeAudit
	// The sandboxes are built by a worker process, the lean jaild, so
	// that their init is not this binary (see internal/worker). Closing
	// it waits until every sandbox is torn down, so that jaild exits only
	// when nothing of it is left on the host.
	d.worker, err = startWorker(c, cfg.log, command.WorkerOptions{
		LogFormat:      cfg.logFormat,
		Pool:           cfg.pool,
		PoolLimits:     cfg.defaults,
		Sweep:          sweepInterval,
		CPUProfile:     c.String("worker-cpu-profile"),
		PrestartIdle:   cfg.prestartIdle,
		PrestartBuilds: cfg.prestartBuilds,
	})
	if err != nil {
		return nil, err
	}
	pol, closePolicy, err := openPolicy(c, cfg.policy, metrics.PolicyObserver())
	if err != nil {
		return nil, err
	}
	d.closePolicy = closePolicy
	eg := daemonEgress(cfg.egress, cfg.proxy, audit, pol)
	// The sessions' workspaces are the worker's; they are removed before
	// the worker stops.
	sessions, err := newSessions(cfg.sessions, d.worker)
	if err != nil {
		return nil, err
	}
	d.Config = server.Config{
		Base:        d.worker,
		WorkerExits: d.worker.Exits,
		Sessions:    sessions,
		Chain:       run.ChainOptions{Max: cfg.max, Admission: cfg.admission, Audit: audit, Policy: pol, Egress: eg, WorkDir: cfg.sessions.WorkDir},
	}
	if cfg.mcp != nil {
		mo := *cfg.mcp
		if cfg.mcpSessions {
			// Made as POST /sessions' are.
			mo.Sessions = d.SessionService()
			mo.Sessions.Metrics = metrics
		}
		d.MCP = &mo
	}
	return d, nil
}

// Close removes the sessions, closes the policy engine, then stops the
// worker, which waits until every sandbox is torn down, and returns its
// error; last the audit log and the profiles' listener. Close it after the
// front end has stopped; a second Close does nothing.
func (d *daemon) Close() error {
	if d.Sessions != nil {
		if err := d.Sessions.Close(); err != nil {
			d.log.Warn("removing sessions", "err", err)
		}
		d.Sessions = nil
	}
	callOnce(&d.closePolicy)
	var err error
	if d.worker != nil {
		if err = d.worker.Close(); err != nil {
			err = fmt.Errorf("clean up sandboxes: %w", err)
		}
		d.worker = nil
	}
	callOnce(&d.closeAudit)
	callOnce(&d.stopPprof)
	return err
}

// callOnce calls *f, unless it is nil, and makes it nil.
func callOnce(f *func()) {
	if *f != nil {
		(*f)()
		*f = nil
	}
}

// openAudit opens --audit-log, unless it is "off" (then the log is nil),
// and returns how to close it.
func openAudit(c *cli.Context, log *slog.Logger) (*run.AuditLog, func(), error) {
	path := c.String("audit-log")
	if path == "off" {
		return nil, func() {}, nil
	}
	w, err := run.OpenAuditLog(path, os.Stderr)
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), api.ExitInternal)
	}
	l := run.NewAuditLog(w, run.AuditOptions{LogCommand: c.Bool("audit-command"), Logger: log})
	return l, func() { w.Close() }, nil
}

// admitOptions reads the admission flags. Every run holds twice its
// maximum output: a --max-output-memory below that would refuse requests
// that the maxima allow.
func admitOptions(c *cli.Context, maxOutput int64) (run.AdmitOptions, error) {
	adm := run.AdmitOptions{
		MaxConcurrent: c.Int("max-concurrent"),
		MaxQueue:      c.Int("queue"),
		MaxWait:       c.Duration("queue-wait"),
	}
	var err error
	if adm.MaxOutputMemory, err = command.SizeFlag(c, "max-output-memory"); err != nil {
		return adm, err
	}
	if adm.MaxConcurrent <= 0 || adm.MaxQueue < 0 || adm.MaxWait <= 0 {
		return adm, command.UsageError("--max-concurrent and --queue-wait must be positive, --queue not negative")
	}
	if adm.MaxOutputMemory < 2*maxOutput {
		return adm, command.UsageError("--max-output-memory %d is less than twice the largest output a run may keep (%d per stream)", adm.MaxOutputMemory, maxOutput)
	}
	return adm, nil
}

// limitHeap sets the Go heap's soft limit to the output memory plus room
// for the daemon itself, unless GOMEMLIMIT chose one: left to GOGC alone, a
// heap holding the output of several large runs would grow to twice that
// before the garbage collector ran.
func limitHeap(outputMemory int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(outputMemory + heapRoom)
	}
}

// heapRoom is the heap the daemon may use besides the output it holds.
const heapRoom = 32 << 20

// applyConfigFile sets every flag named in the config file that was not
// given on the command line or in the environment.
func applyConfigFile(c *cli.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	known := map[string]bool{}
	for _, fl := range c.Command.Flags {
		for _, n := range fl.Names() {
			known[n] = true
		}
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if unq, err := strconv.Unquote(val); err == nil && strings.HasPrefix(val, `"`) {
			val = unq
		}
		switch {
		case !ok || key == "":
			return fmt.Errorf("config %s:%d: want flag-name = value", path, n)
		case !known[key] || key == "config":
			return fmt.Errorf("config %s:%d: unknown setting %q", path, n, key)
		case c.IsSet(key):
			continue // the command line or the environment wins
		}
		if err := c.Set(key, val); err != nil {
			return fmt.Errorf("config %s:%d: %s: %w", path, n, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}
