package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

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
README). Sizes take a unit: 512K, 256M, 1G. Configuration, as for jaild serve:
flags beat JAILD_* environment variables, which beat --config FILE, which
beats the defaults shown here.`,
	Flags: append([]cli.Flag{
		// Client configurations often say "jaild mcp --stdio": accepted,
		// and changes nothing, since stdio is jaild mcp's only transport.
		&cli.BoolFlag{Name: "stdio", Usage: "serve over stdin/stdout, which jaild mcp always does (for client configurations that name the transport)"},
		&cli.StringFlag{Name: "memory", Value: command.Size(box.DefaultMemory), EnvVars: []string{"JAILD_MEMORY"}, Usage: "memory limit of each sandbox, no swap"},
		&cli.Int64Flag{Name: "pids", Value: box.DefaultPids, EnvVars: []string{"JAILD_PIDS"}, Usage: "maximum processes and threads of each sandbox"},
		&cli.Float64Flag{Name: "cpus", Value: box.DefaultCPUs, EnvVars: []string{"JAILD_CPUS"}, Usage: "CPU quota of each sandbox in cores"},
		&cli.StringFlag{Name: "tmpfs-size", Value: command.Size(box.DefaultTmpfsSize), EnvVars: []string{"JAILD_TMPFS_SIZE"}, Usage: "size cap of each of the working directory and /tmp"},
		&cli.DurationFlag{Name: "timeout", Value: server.DefaultMCPTimeout, EnvVars: []string{"JAILD_MCP_TIMEOUT"}, Usage: "timeout of a tool call that gives none (at most --max-timeout)"},
	}, daemonFlags...),
	Action:       mcpAction,
	OnUsageError: command.OnUsageError,
}

// mcpAction reads every flag, starts the daemon and serves its MCP tools
// on stdin and stdout until the client goes away or a signal stops it.
func mcpAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return command.UsageError("jaild mcp takes no arguments")
	}
	cfg, err := readDaemonConfig(c, sandboxFlags)
	if err != nil {
		return err
	}
	if cfg.max.ToolTimeout = c.Duration("timeout"); cfg.max.ToolTimeout <= 0 {
		return command.UsageError("--timeout must be positive")
	}
	if c.IsSet("max-output") && !c.IsSet("mcp-max-output") {
		// A client configuration written when jaild mcp's --max-output
		// counted the characters a tool result keeps.
		cfg.log.Warn("--max-output caps the bytes a run keeps per stream, as in jaild serve; " +
			"the characters a tool result keeps are --mcp-max-output (JAILD_MCP_MAX_OUTPUT)")
	}
	// The protocol gets its own descriptor for stdout, and fd 1 becomes
	// stderr: nothing but protocol messages can reach the client, even if
	// some library prints.
	out, err := protocolStdout()
	if err != nil {
		return command.ExitError(fmt.Errorf("set up stdout: %w", err))
	}
	defer out.Close()
	d, err := openDaemon(c, cfg, nil) // no /metrics over stdio
	if err != nil {
		return err
	}
	defer d.Close()
	if err := serveStdio(d, out); err != nil {
		return err
	}
	if err := d.Close(); err != nil {
		return command.ExitError(err)
	}
	return nil
}

// serveStdio serves d's MCP tools on stdin and out, as one MCP session of
// the user that started jaild mcp. It returns when stdin reaches EOF (the
// client went away), which also cancels the calls in flight and so kills
// their sandboxes, or at SIGINT, SIGTERM or SIGHUP. A bad line is answered
// with a JSON-RPC error and ends nothing.
func serveStdio(d *daemon, out *os.File) error {
	// The SDK lets calls in flight finish before it closes, so the
	// runner's contexts are tied to the signal too: a signal kills running
	// sandboxes instead of waiting for them.
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer stop()
	runner, err := d.Runner()
	if err != nil {
		return command.ExitError(err)
	}
	opts := d.MCPOptions()
	opts.Caller = stdioCaller()
	srv := server.NewMCPServer(shutdownRunner{ctx: ctx, r: runner, caller: opts.Caller}, opts)
	err = srv.Run(ctx, &server.StdioTransport{Reader: os.Stdin, Writer: out})
	if err != nil && ctx.Err() == nil {
		return command.ExitError(fmt.Errorf("mcp session: %w", err))
	}
	return nil
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

func (s shutdownRunner) Run(ctx context.Context, req run.Request) (*box.Result, error) {
	// The caller, for the audit log, is whoever started jaild mcp.
	req.Caller = s.caller
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	res, err := s.r.Run(ctx, req)
	return res, s.shuttingDown(err)
}

// Start is Run's counterpart for background jobs: the start, not the job,
// ends with the process's context (the job is its session's).
func (s shutdownRunner) Start(ctx context.Context, req run.Request) (string, error) {
	req.Caller = s.caller
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	id, err := s.r.Start(ctx, req)
	return id, s.shuttingDown(err)
}

// shuttingDown says that err is the shutdown's, if it is.
func (s shutdownRunner) shuttingDown(err error) error {
	if err != nil && s.ctx.Err() != nil {
		return fmt.Errorf("jaild is shutting down: %w", err)
	}
	return err
}
