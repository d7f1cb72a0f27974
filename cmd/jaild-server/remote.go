package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/command"
)

// maxRemoteStdin bounds how much of its stdin jaild remote reads into
// memory; the daemon's own --max-body is usually lower and answers 413.
const maxRemoteStdin = 64 << 20

var remoteCommand = &cli.Command{
	Name:      "remote",
	Usage:     command.RemoteUsage,
	ArgsUsage: "-- COMMAND [ARG...]",
	Description: `Sends COMMAND (argv, no shell) or --shell STRING to a jaild serve daemon's
/raw endpoint, writes its stdout and stderr here as they are produced, and
exits with its exit code. Unless --no-stdin is given or stdin is a terminal,
stdin is read to its end and sent along. Ctrl-C kills the remote sandbox.

Exit codes are those of jaild run: the command's own, 128+N if signal N killed
it, 123 OOM-killed, 124 timed out, 125 refused as invalid (or not authorized),
126 not executable, 127 not found, 120-122 the daemon's host cannot build
sandboxes, 119 anything else (daemon unreachable or busy, run cancelled).

An https:// --server is checked against the system's CAs, or only against
--ca-file's (a private CA, or the daemon's self-signed certificate). The
token is never sent over plain http:// to a host other than loopback, unless
--insecure-plaintext is given.

With --session ID (or JAILD_SESSION; see jaild session new) the command runs
in that session: a fresh sandbox on the session's /work, working directory
and environment. With --background too it starts as a background job of the
session: jaild remote prints the job's id and exits 0 at once; jaild jobs
SESSION JOB --follow reads its output. A session that does not exist (any
more) is a usage error, 125.

Limits left unset get the daemon's defaults; a request may only ask for less
than the daemon's maximums. Sizes take a unit: 512K, 256M, 1G.`,
	Flags: withConnFlags(
		&cli.StringFlag{Name: "session", EnvVars: []string{"JAILD_SESSION"}, Usage: "run in this session (jaild session new): its /work, working directory and environment"},
		&cli.BoolFlag{Name: "background", Aliases: []string{"b"}, Usage: "with --session: start the command as a background job of the session, print its id and exit (see jaild jobs)"},
		&cli.StringSliceFlag{Name: "keep-env", EnvVars: []string{"JAILD_KEEP_ENV"}, Usage: "pass these local environment variables on: --keep-env=CI,LANG or --keep-env CI (repeatable); unset ones are skipped; a policy sees them as input.env"},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, EnvVars: []string{"JAILD_ENV"}, Usage: "set KEY=VALUE in the command's environment (repeatable)"},
		&cli.DurationFlag{Name: "timeout", EnvVars: []string{"JAILD_TIMEOUT"}, Usage: "wall-clock limit (default: the daemon's, " + box.DefaultTimeout.String() + " unless it caps lower)"},
		&cli.StringFlag{Name: "cwd", EnvVars: []string{"JAILD_CWD"}, Usage: "working directory, under the daemon's working directory (/work unless its --sandbox-workdir says otherwise) or /tmp (default: that directory)"},
		&cli.StringFlag{Name: "memory", EnvVars: []string{"JAILD_MEMORY"}, Usage: "memory limit (default: the daemon's)"},
		&cli.Int64Flag{Name: "pids", EnvVars: []string{"JAILD_PIDS"}, Usage: "maximum processes and threads (default: the daemon's)"},
		&cli.Float64Flag{Name: "cpus", EnvVars: []string{"JAILD_CPUS"}, Usage: "CPU quota in cores (default: the daemon's)"},
		&cli.StringFlag{Name: "tmpfs-size", EnvVars: []string{"JAILD_TMPFS_SIZE"}, Usage: "size of each of /work and /tmp (default: the daemon's)"},
		&cli.StringFlag{Name: "max-output", EnvVars: []string{"JAILD_MAX_OUTPUT"}, Usage: "output the daemon keeps per stream; the stream itself is not cut"},
		&cli.StringFlag{Name: "shell", Usage: "run this string with /bin/sh -c instead of COMMAND"},
		&cli.BoolFlag{Name: "no-stdin", Aliases: []string{"n"}, EnvVars: []string{"JAILD_NO_STDIN"}, Usage: "do not read stdin; the command reads /dev/null"},
		&cli.BoolFlag{Name: "json", EnvVars: []string{"JAILD_JSON"}, Usage: "use /run and print the whole result as JSON instead of streaming"},
		&cli.StringFlag{Name: "egress", EnvVars: []string{"JAILD_REMOTE_EGRESS"}, Usage: `ask for network through the daemon's egress proxy: "true" (its allowlist), "false", or host:port patterns narrowing it, comma-separated (default: the daemon's --egress-default)`},
	),
	Action:       remoteAction,
	OnUsageError: command.OnUsageError,
}

func remoteAction(c *cli.Context) error {
	req, err := remoteRequest(c)
	if err != nil {
		return err
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}

	// A signal closes the connection, which makes the daemon kill the
	// sandbox at once.
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer stop()

	if c.Bool("background") {
		a, err := cl.Start(ctx, req)
		if err != nil {
			return remoteError(ctx, req, err)
		}
		_, _ = fmt.Fprintln(c.App.Writer, a.JobID)
		return nil
	}
	if c.Bool("json") {
		resp, err := cl.Run(ctx, req)
		if err != nil {
			return remoteError(ctx, req, err)
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		_ = enc.Encode(resp)
		return remoteExit(resp.ExitCode, &resp.Verdict)
	}
	exit, err := cl.Raw(ctx, req, c.App.Writer, c.App.ErrWriter)
	if err != nil {
		return remoteError(ctx, req, err)
	}
	return remoteExit(*exit.ExitCode, exit.Verdict)
}

// remoteRequest builds the request from the flags, arguments and stdin.
func remoteRequest(c *cli.Context) (*api.Request, error) {
	req := &api.Request{Cwd: c.String("cwd"), SessionID: c.String("session"), Egress: remoteEgress(c.String("egress"))}
	if c.Bool("background") && (req.SessionID == "" || c.Bool("json")) {
		return nil, command.UsageError("--background starts a job of a session: give --session ID, without --json")
	}
	if err := remoteArgs(c, req); err != nil {
		return nil, err
	}
	env, err := remoteEnv(c)
	if err != nil {
		return nil, err
	}
	if len(env) > 0 {
		req.Env = env
	}
	if err := remoteLimits(c, req); err != nil {
		return nil, err
	}
	if !c.Bool("no-stdin") && !isTerminal(os.Stdin) {
		data, err := io.ReadAll(io.LimitReader(os.Stdin, maxRemoteStdin+1))
		if err != nil {
			return nil, command.UsageError("read stdin: %v", err)
		}
		if len(data) > maxRemoteStdin {
			return nil, command.UsageError("stdin is larger than %d bytes", maxRemoteStdin)
		}
		if len(data) > 0 {
			// Always as base64: stdin may be any bytes, and JSON text
			// would turn invalid UTF-8 into U+FFFD.
			req.StdinB64 = data
		}
	}
	return req, nil
}

// remoteArgs sets req's command from --shell or the arguments.
func remoteArgs(c *cli.Context, req *api.Request) error {
	switch sh, args := c.String("shell"), c.Args().Slice(); {
	case sh != "" && len(args) > 0:
		return command.UsageError("give either --shell STRING or -- COMMAND, not both")
	case c.IsSet("shell"):
		if strings.TrimSpace(sh) == "" {
			return command.UsageError("--shell: empty command")
		}
		req.Command = sh
	case len(args) == 0:
		return command.UsageError("missing command: jaild remote [flags] -- COMMAND [ARG...]")
	default:
		req.Executable, req.Args = args[0], args[1:]
	}
	return nil
}

// remoteEnv is the environment --keep-env takes from this process's and
// --env sets, the latter winning.
func remoteEnv(c *cli.Context) (map[string]string, error) {
	env := map[string]string{}
	for _, name := range c.StringSlice("keep-env") {
		for _, n := range strings.Split(name, ",") {
			if v, ok := os.LookupEnv(strings.TrimSpace(n)); ok {
				env[strings.TrimSpace(n)] = v
			}
		}
	}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, command.UsageError("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// remoteLimits sets req's timeout and limits from the flags given; those
// not given are left to the server's defaults.
func remoteLimits(c *cli.Context, req *api.Request) error {
	if c.IsSet("timeout") {
		d := c.Duration("timeout")
		if d <= 0 {
			return command.UsageError("--timeout must be positive")
		}
		ms := d.Milliseconds()
		req.TimeoutMS = &ms
	}
	for _, s := range []struct {
		flag string
		dst  **int64
	}{{"memory", &req.MemoryBytes}, {"tmpfs-size", &req.TmpfsSizeBytes}, {"max-output", &req.MaxOutputBytes}} {
		if !c.IsSet(s.flag) {
			continue
		}
		n, err := command.SizeFlag(c, s.flag)
		if err != nil {
			return err
		}
		*s.dst = &n
	}
	if c.IsSet("pids") {
		n := c.Int64("pids")
		req.Pids = &n
	}
	if c.IsSet("cpus") {
		n := c.Float64("cpus")
		req.CPUs = &n
	}
	return nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// remoteExit exits as jaild run would for the same result.
func remoteExit(exitCode int, v *api.Verdict) error {
	code := command.ResultCode(&box.Result{ExitCode: exitCode, Signal: v.Signal, TimedOut: v.TimedOut, OOMKilled: v.OOMKilled})
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// remoteError maps a failed call to jaild run's exit codes; a session that
// is not there (404 not_found) is a usage error with a message of its own.
func remoteError(ctx context.Context, req *api.Request, err error) error {
	ae, exit := apiErrorOf(ctx, err, "interrupted; the remote sandbox was killed")
	if ae == nil {
		return exit
	}
	if req.SessionID != "" && ae.Status == http.StatusNotFound {
		return cli.Exit(fmt.Sprintf("no session %q: it expired or was removed (jaild session new starts one)", req.SessionID), api.ExitUsage)
	}
	code := api.CodeOutcome(ae.Code).Exit
	msg := ae.Error()
	if ae.RetryAfter > 0 {
		msg = fmt.Sprintf("%s; retry after %v", msg, ae.RetryAfter)
	}
	return cli.Exit(msg, code)
}

// remoteEgress is --egress as the request's field: nil when not given.
func remoteEgress(s string) *api.Egress {
	switch strings.TrimSpace(s) {
	case "":
		return nil
	case "true", "on":
		return &api.Egress{Allowed: true}
	case "false", "off":
		return &api.Egress{}
	}
	hosts := []string{}
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return &api.Egress{Allowed: true, Hosts: hosts}
}
