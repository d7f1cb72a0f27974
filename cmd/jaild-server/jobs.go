package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/command"
)

// followWait is how long each poll of jobs --follow lets the daemon wait
// for new output; a variable so that tests can poll faster.
var followWait = 10 * time.Second

var jobsCommand = &cli.Command{
	Name:      "jobs",
	Usage:     command.JobsUsage,
	ArgsUsage: "SESSION [JOB [--follow]]",
	Description: `With a SESSION only, lists its background jobs (jaild remote --session SESSION
--background -- COMMAND starts one and prints its id; so does a POST /run with
run_in_background, and the MCP bash tool's run_in_background). With a JOB, prints the job's output
so far (stdout here, stderr on stderr); --follow keeps printing until the
job ends and then exits with its exit status, as jaild remote would.

Exit codes otherwise: 0, 1 if the daemon refused (no such session or job),
125 for a bad command line or token, 119 if the daemon cannot be reached.`,
	Flags: withConnFlags(
		&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "print the job's output as it comes until it ends, then exit with its status"},
	),
	Action:       jobsAction,
	OnUsageError: command.OnUsageError,
}

func jobsAction(c *cli.Context) error {
	// urfave/cli stops at the first argument: accept --follow after
	// SESSION JOB too, as the usage line shows it.
	follow := c.Bool("follow")
	var args []string
	for _, a := range c.Args().Slice() {
		switch a {
		case "--follow", "-follow", "-f":
			follow = true
		default:
			args = append(args, a)
		}
	}
	if len(args) == 0 || len(args) > 2 {
		return command.UsageError("usage: jaild jobs SESSION [JOB [--follow]]")
	}
	if follow && len(args) != 2 {
		return command.UsageError("--follow needs a JOB")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	if len(args) == 1 {
		jobs, err := cl.Jobs(ctx, args[0])
		if err != nil {
			return callError(ctx, err)
		}
		tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tSTATE\tEXIT\tSTARTED\tCOMMAND")
		for _, j := range jobs {
			exit := "-"
			if j.ExitCode != nil {
				exit = fmt.Sprint(*j.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.JobID, j.State, exit, j.StartedAt.Local().Format(time.DateTime), strings.Join(j.Command, " "))
		}
		return tw.Flush()
	}

	q := client.JobQuery{}
	if follow {
		q.Wait, q.UntilOutput = followWait, true
	}
	for {
		j, err := cl.Job(ctx, args[0], args[1], q)
		if err != nil {
			return callError(ctx, err)
		}
		if _, err := c.App.Writer.Write([]byte(j.Stdout)); err != nil {
			return cli.Exit(fmt.Sprintf("write stdout: %v", err), 1)
		}
		_, _ = c.App.ErrWriter.Write([]byte(j.Stderr))
		q.StdoutOffset, q.StderrOffset = j.StdoutOffset, j.StderrOffset
		if !follow {
			return nil
		}
		if j.State != "running" {
			if j.Error != "" {
				fmt.Fprintln(c.App.ErrWriter, "jaild: job:", j.Error)
			}
			if j.ExitCode == nil || j.Verdict == nil {
				return cli.Exit("", exitRefused)
			}
			return remoteExit(*j.ExitCode, j.Verdict)
		}
	}
}
