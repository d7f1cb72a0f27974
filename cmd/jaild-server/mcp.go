package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

var mcpCommand = &cli.Command{
	Name:  "mcp",
	Usage: command.MCPUsage,
	Description: `Speaks the Model Context Protocol on stdin/stdout for clients that launch
their tools as subprocesses. Tools (--mcp-tools): bash (a shell command line),
execute (a program and its arguments, with optional stdin), and if listed
run_network_tool (the policy-runner convention's); every call runs in a fresh
sandbox with the limits below. Only protocol messages go to stdout; logs go to
stderr. jaild mcp exits when stdin closes, or on SIGINT/SIGTERM, after killing
and cleaning up every running sandbox. It needs root, like every command that
builds sandboxes: register it with a client as "sudo jaild mcp" (see the
README). Sizes take a unit: 512K, 256M, 1G.`,
	Flags: append([]cli.Flag{
		// Client configurations often say "jaild mcp --stdio": accepted,
		// and changes nothing, since stdio is jaild mcp's only transport.
		&cli.BoolFlag{Name: "stdio", Usage: "serve over stdin/stdout, which jaild mcp always does (for client configurations that name the transport)"},
		&cli.StringFlag{Name: "memory", Value: command.Size(box.DefaultMemory), EnvVars: []string{"JAILD_MEMORY"}, Usage: "memory limit of each sandbox, no swap"},
		&cli.Int64Flag{Name: "pids", Value: box.DefaultPids, EnvVars: []string{"JAILD_PIDS"}, Usage: "maximum processes and threads of each sandbox"},
		&cli.Float64Flag{Name: "cpus", Value: box.DefaultCPUs, EnvVars: []string{"JAILD_CPUS"}, Usage: "CPU quota of each sandbox in cores"},
		&cli.StringFlag{Name: "tmpfs-size", Value: command.Size(box.DefaultTmpfsSize), EnvVars: []string{"JAILD_TMPFS_SIZE"}, Usage: "size cap of each of the working directory and /tmp"},
		&cli.DurationFlag{Name: "timeout", Value: server.DefaultMCPTimeout, EnvVars: []string{"JAILD_MCP_TIMEOUT"}, Usage: "timeout of a tool call that gives none"},
		&cli.DurationFlag{Name: "max-timeout", Value: server.MaxMCPTimeout, EnvVars: []string{"JAILD_MAX_TIMEOUT"}, Usage: "ceiling for the timeout a tool call asks for (at most 10m)"},
		&cli.StringFlag{Name: "max-output", Value: fmt.Sprint(server.DefaultMCPMaxOutput), EnvVars: []string{"JAILD_MCP_MAX_OUTPUT", "MCP_EXEC_MAX_OUTPUT_BYTES"}, Usage: "characters of each stream a bash or execute result keeps (MCP_EXEC_MAX_OUTPUT_BYTES is read as characters too); beyond it head and tail are kept with a marker (run_network_tool keeps 1 MiB, its convention's cap in bytes)"},
		mcpToolsFlag(),
		&cli.IntFlag{Name: "max-concurrent", Value: run.DefaultMaxConcurrent, EnvVars: []string{"JAILD_MAX_CONCURRENT"}, Usage: "sandboxes running at once; further calls wait in a queue"},
		&cli.IntFlag{Name: "pool", Value: 1, EnvVars: []string{"JAILD_POOL"}, Usage: "sandboxes kept started ahead of time, so that a call does not wait for one to be built (0: none)"},
		&cli.IntFlag{Name: "queue", Aliases: []string{"max-queue"}, Value: 100, EnvVars: []string{"JAILD_QUEUE", "JAILD_MAX_QUEUE"}, Usage: "calls that may wait for a sandbox; beyond it a call fails at once with \"busy\""},
		&cli.DurationFlag{Name: "queue-wait", Value: time.Minute, EnvVars: []string{"JAILD_QUEUE_WAIT"}, Usage: "how long a queued call waits before it fails with \"busy\""},
		&cli.StringFlag{Name: "shell-path", Value: "/bin/bash", EnvVars: []string{"JAILD_SHELL_PATH"}, Usage: "shell inside the sandbox that runs the bash tool's command lines (with -c)"},
		&cli.StringFlag{Name: "max-output-memory", Value: "64M", EnvVars: []string{"JAILD_MAX_OUTPUT_MEMORY"}, Usage: "memory the output of all running calls may take (each holds twice --max-output); beyond it calls queue"},
		&cli.StringFlag{Name: "audit-log", Value: "-", EnvVars: []string{"JAILD_AUDIT_LOG"}, Usage: `file to append one JSON line per call to; "-" is stderr, "off" none`},
		&cli.BoolFlag{Name: "audit-command", EnvVars: []string{"JAILD_AUDIT_COMMAND"}, Usage: "put each call's command in the audit log, not only its SHA-256"},
	}, slices.Concat(policyFlags, sessionFlags, []cli.Flag{mcpSessionFlag}, command.EgressFlags, command.DaemonEgressFlags, command.ManagerFlags)...),
	Action:       mcpAction,
	OnUsageError: command.OnUsageError,
}

func mcpAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return command.UsageError("jaild mcp takes no arguments")
	}
	opts, err := mcpOptions(c)
	if err != nil {
		return err
	}
	sessCfg, err := sessionConfig(c, opts.Logger)
	if err != nil {
		return err
	}
	mcpSess, err := mcpSessionsOn(c)
	if err != nil {
		return err
	}
	// The protocol gets its own descriptor for stdout, and fd 1 becomes
	// stderr: nothing but protocol messages can reach the client, even if
	// some library prints.
	out, err := protocolStdout()
	if err != nil {
		return cli.Exit(fmt.Sprintf("set up stdout: %v", err), api.ExitInternal)
	}
	defer out.Close()

	// The worker builds the sandboxes (see internal/worker); closing it
	// waits until every sandbox is torn down.
	egOpts, egCfg, err := daemonEgressFlags(c, opts.Logger)
	if err != nil {
		return err
	}
	w, err := startWorker(c, opts.Logger, "text", opts.Limits, 0)
	if err != nil {
		return err
	}
	defer w.Close()

	// Signals end the session. The SDK lets calls in flight finish before
	// it closes, so the runner's contexts are tied to the signal too: a
	// signal kills running sandboxes instead of waiting for them.
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer stop()
	// One client may still send many calls at once; admission control
	// keeps them from starting more sandboxes than the host can run.
	// The same chain as the daemon's: the flags' limits are the maxima
	// (a tool call never asks for more), admission control, audit log.
	// The most output a call may keep: run_network_tool's 1 MiB, if
	// served, is not --max-output's.
	maxOutput := server.MCPCaptureBytes(opts.MaxOutput)
	if slices.Contains(opts.Tools, server.ToolRunNetworkTool) {
		maxOutput = max(maxOutput, server.NetworkToolMaxOutput)
	}
	adm, err := admitOptions(c, maxOutput)
	if err != nil {
		return err
	}
	limitHeap(adm.MaxOutputMemory)
	audit, closeAudit, err := openAudit(c, opts.Logger)
	if err != nil {
		return err
	}
	defer closeAudit()
	pol, closePolicy, err := openPolicy(c, opts.Logger, nil) // no /metrics over stdio
	if err != nil {
		return err
	}
	defer closePolicy()
	// The session of this stdio MCP session (--mcp-session auto): its
	// workspace is the worker's, removed before the worker stops.
	sessions, err := newSessions(sessCfg, w)
	if err != nil {
		return err
	}
	defer sessions.Close()
	if mcpSess {
		opts.Sessions = sessions
	}
	eg := daemonEgress(egOpts, egCfg, audit, pol)
	opts.Egress = c.Bool("mcp-egress")
	opts.SessionEgress = server.MCPSessionEgress(eg, nil)
	runner, err := run.Chain(w, run.ChainOptions{
		Max:       run.Maxima{Limits: opts.Limits, Timeout: opts.MaxTimeout, MaxOutput: maxOutput},
		Admission: adm,
		Audit:     audit,
		Policy:    pol,
		Sessions:  sessions,
		Egress:    eg,
		WorkDir:   opts.WorkDir,
	})
	if err != nil {
		return command.UsageError("%v", err)
	}
	srv := server.NewMCPServer(shutdownRunner{ctx: ctx, r: runner, caller: stdioCaller()}, opts)
	// Run returns when stdin reaches EOF (the client went away), which
	// also cancels the calls in flight and so kills their sandboxes. A bad
	// line is answered with a JSON-RPC error and ends nothing.
	err = srv.Run(ctx, &server.StdioTransport{Reader: os.Stdin, Writer: out})
	if err != nil && ctx.Err() == nil {
		return cli.Exit(fmt.Sprintf("mcp session: %v", err), api.ExitInternal)
	}
	return nil
}

func mcpOptions(c *cli.Context) (server.MCPOptions, error) {
	var o server.MCPOptions
	var err error
	if o.Limits, o.MaxOutput, err = command.LimitFlags(c, ""); err != nil {
		return o, err
	}
	o.DefaultTimeout = c.Duration("timeout")
	o.MaxTimeout = c.Duration("max-timeout")
	if o.DefaultTimeout <= 0 || o.MaxTimeout <= 0 || o.MaxTimeout > server.MaxMCPTimeout {
		return o, command.UsageError("--timeout and --max-timeout must be positive, --max-timeout at most %v", server.MaxMCPTimeout)
	}
	o.Shell = c.String("shell-path")
	if o.WorkDir, err = command.SandboxWorkDir(c); err != nil {
		return o, err
	}
	if o.Tools, err = mcpTools(c); err != nil {
		return o, err
	}
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return o, nil
}

// protocolStdout returns a file for the original stdout and points fd 1 at
// stderr.
func protocolStdout() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(unix.Stdout), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("dup stdout: %w", err)
	}
	if err := unix.Dup3(unix.Stderr, unix.Stdout, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("point stdout at stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "mcp-stdout"), nil
}

// stdioCaller names the client of jaild mcp in the audit log: the user
// that started it (through sudo, the one sudo names).
func stdioCaller() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return "stdio:" + u
	}
	return "stdio:uid:" + strconv.Itoa(os.Getuid())
}

// shutdownRunner ends every run when ctx (the process's signal context)
// ends, as well as when the run's own context does.
type shutdownRunner struct {
	ctx    context.Context
	r      run.Runner
	caller string
}

func (s shutdownRunner) Run(ctx context.Context, req *run.Request) (*box.Result, error) {
	// The caller, for the audit log, is whoever started jaild mcp.
	req.Caller = s.caller
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	res, err := s.r.Run(ctx, req)
	if err != nil && s.ctx.Err() != nil {
		err = fmt.Errorf("jaild is shutting down: %w", err)
	}
	return res, err
}
