package command

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/pidfile"
	"github.com/jaild/jaild/jail"
)

// DaemonPidFile is the name of jaild serve's pid file in its state dir.
const DaemonPidFile = "serve.pid"

// Drain is the drain command: it asks the daemon of a state dir to drain
// and exit, as a Kubernetes preStop hook or a load balancer's operator
// would, through SIGUSR1 (a SIGTERM sent next is then the daemon's first
// stop signal, not a second one that kills at once).
var Drain = &cli.Command{
	Name:  "drain",
	Usage: "make the running jaild serve drain (new work elsewhere, its sessions served until idle) and exit",
	Description: `Signals the jaild serve that uses --state-dir (found through its pid file,
serve.pid) to drain: /readyz fails at once, new sessions and one-shot runs get
503 with Retry-After, calls in its sessions are served until each is idle for
--drain-idle or --drain-timeout passes; then it shuts down and exits 0.
With --wait, returns only once the daemon has exited (a preStop hook).`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir, EnvVars: []string{"JAILD_STATE_DIR"}, Usage: "the daemon's state dir"},
		&cli.BoolFlag{Name: "wait", Usage: "wait until the daemon has exited"},
		&cli.DurationFlag{Name: "timeout", Usage: "with --wait, give up after this long (0: no limit)"},
	},
	OnUsageError: OnUsageError,
	Action: func(c *cli.Context) error {
		if c.Args().Len() > 0 {
			return UsageError("jaild drain takes no arguments")
		}
		path := filepath.Join(c.String("state-dir"), DaemonPidFile)
		pid, err := pidfile.Signal(path, unix.SIGUSR1)
		if errors.Is(err, pidfile.ErrNotRunning) {
			return UsageError("no jaild serve is running with state dir %s", c.String("state-dir"))
		}
		if err != nil {
			return cli.Exit(fmt.Sprintf("drain: %v", err), api.ExitInternal)
		}
		fmt.Fprintf(c.App.Writer, "draining jaild serve (pid %d)\n", pid)
		if !c.Bool("wait") {
			return nil
		}
		if err := pidfile.Wait(path, c.Duration("timeout")); err != nil {
			return cli.Exit(fmt.Sprintf("drain: %v", err), api.ExitInternal)
		}
		fmt.Fprintln(c.App.Writer, "drained: the daemon has exited")
		return nil
	},
}
