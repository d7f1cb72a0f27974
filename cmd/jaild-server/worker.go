package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/sibling"
	"github.com/jaild/jaild/internal/worker"
	"github.com/jaild/jaild/jail"
)

// workerBinary is the lean build, next to this one, that serve and mcp
// start as their worker: it builds every sandbox, so that the sandboxes'
// init is the lean binary and not this one (see internal/worker).
const workerBinary = "jaild"

// startWorker starts the worker with the manager flags of c and o. Its
// environment is this process's with the sandboxes' inits' GOMAXPROCS
// (command.BuilderEnv). The worker fails as the Manager would, with the
// same exit status.
func startWorker(c *cli.Context, log *slog.Logger, o command.WorkerOptions) (*worker.Client, error) {
	// On cgroup v2 the worker, which builds the parent cgroup, must start
	// in the daemon's leaf of the unit's cgroup (see cgroup.Settle).
	if c.String("cgroup-parent") == "" {
		if err := cgroup.Settle(); err != nil {
			return nil, command.ExitError(fmt.Errorf("%w: %w", box.ErrUnsupported, err))
		}
	}
	env, added := command.BuilderEnv(os.Environ())
	o.DefaultGOMAXPROCS = added
	o.PrivateMounts = command.PrivateMounts(c)
	var opened error
	w, err := worker.Start(worker.Config{
		Open: func() (string, int, error) {
			bin, fd, err := sibling.Open(workerBinary)
			if err != nil {
				opened = err
			}
			return bin, fd, err
		},
		Args:          command.WorkerArgs(c, o),
		Env:           env,
		Logger:        log,
		PrivateMounts: o.PrivateMounts,
	})
	switch {
	case err == nil:
		return w, nil
	case opened != nil:
		return nil, cli.Exit(fmt.Sprintf("sandboxes are built by %s, which cannot be executed: %v (scripts/setup.sh builds it next to %s)", workerBinary, err, serverName), api.ExitInternal)
	case errors.Is(err, worker.ErrDown):
		return nil, cli.Exit(err.Error(), api.ExitInternal)
	}
	return nil, command.ExitError(err)
}

// serverName is this binary's installed name.
const serverName = "jaild-server"

// runnerHealth checks that a sandbox can run: what /healthz reports. The
// server caches its result, so it runs at most every few seconds.
func runnerHealth(r worker.Runner) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		res, err := r.Run(ctx, &jail.Spec{Command: box.Command{Args: []string{"true"}, Timeout: 10 * time.Second}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("test command true exited %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		return nil
	}
}
