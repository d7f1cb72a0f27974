package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
)

var sessionCommand = &cli.Command{
	Name:  "session",
	Usage: command.SessionUsage,
	Description: `A session keeps /work (a size-capped tmpfs), the working directory, the
exported variables and a loopback network across calls, while every call
still runs in a fresh sandbox. Run in one with jaild remote --session ID (or
JAILD_SESSION=ID), copy files with jaild cp, follow background jobs with
jaild jobs. A session expires after its idle TTL; rm removes it at once.

Exit codes: 0, 1 if the daemon refused (no such session, too many), 125 for
a bad command line or token, 119 if the daemon cannot be reached.`,
	Subcommands: []*cli.Command{
		{
			Name:      "new",
			Usage:     "create a session and print its id",
			ArgsUsage: " ",
			Flags: withConnFlags(
				&cli.DurationFlag{Name: "ttl", Usage: "idle time after which the session expires (default: the daemon's)"},
				&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set KEY=VALUE in every call of the session (repeatable)"},
				&cli.StringFlag{Name: "cwd", Usage: "where calls start: the daemon's working directory (/work unless its --sandbox-workdir says otherwise) or below (default: that directory)"},
				&cli.StringFlag{Name: "workspace-size", Usage: "size of /work, e.g. 256M (default: the daemon's)"},
			),
			Action:       sessionNew,
			OnUsageError: command.OnUsageError,
		},
		{
			Name:         "ls",
			Usage:        "list your sessions",
			ArgsUsage:    " ",
			Flags:        withConnFlags(),
			Action:       sessionList,
			OnUsageError: command.OnUsageError,
		},
		{
			Name:         "rm",
			Usage:        "remove sessions: kill their jobs and delete their /work",
			ArgsUsage:    "ID...",
			Flags:        withConnFlags(),
			Action:       sessionRemove,
			OnUsageError: command.OnUsageError,
		},
	},
}

func sessionNew(c *cli.Context) error {
	if c.NArg() > 0 {
		return command.UsageError("session new takes no arguments")
	}
	req := &api.SessionRequest{Cwd: c.String("cwd")}
	if c.IsSet("ttl") {
		secs := int64(c.Duration("ttl").Seconds())
		if secs <= 0 {
			return command.UsageError("--ttl must be at least a second")
		}
		req.TTLSeconds = &secs
	}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return command.UsageError("--env %q: want KEY=VALUE", kv)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	if c.IsSet("workspace-size") {
		n, err := command.SizeFlag(c, "workspace-size")
		if err != nil {
			return err
		}
		req.WorkspaceBytes = &n
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	s, err := cl.CreateSession(ctx, req)
	if err != nil {
		return callError(ctx, err)
	}
	fmt.Fprintln(c.App.Writer, s.ID)
	return nil
}

func sessionList(c *cli.Context) error {
	if c.NArg() > 0 {
		return command.UsageError("session ls takes no arguments")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	list, err := cl.Sessions(ctx)
	if err != nil {
		return callError(ctx, err)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tEXPIRES IN\tUSED\tJOBS\tCWD")
	now := time.Now()
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%d/%d\t%s\n", s.ID, s.CreatedAt.Local().Format(time.DateTime),
			s.ExpiresAt.Sub(now).Round(time.Second), humanBytes(s.WorkspaceBytesUsed), humanBytes(s.WorkspaceBytesMax),
			s.RunningJobs, s.Jobs, s.Cwd)
	}
	return tw.Flush()
}

func sessionRemove(c *cli.Context) error {
	if c.NArg() == 0 {
		return command.UsageError("missing session id: jaild session rm ID...")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	// Every one is tried; the exit status is the last failure's.
	code := 0
	for _, id := range c.Args().Slice() {
		if err := cl.DeleteSession(ctx, id); err != nil {
			var ec cli.ExitCoder
			if errors.As(callError(ctx, err), &ec) {
				code = ec.ExitCode()
				fmt.Fprintf(c.App.ErrWriter, "jaild: session %s: %s\n", id, ec.Error())
			}
		}
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// humanBytes writes n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ci", float64(n)/float64(div), "KMGTPE"[exp])
}
