// Package command holds what the two binaries of jaild share: the run and
// doctor commands, the hidden worker, the flags that build a jail.Manager
// and the sandbox limits, exit statuses, and [Main]. cmd/jaild (lean: run,
// doctor, the worker, and every sandbox's init) and cmd/jaild-server (every
// command) each list their commands and call Main; what only one binary
// has, it passes to the command that uses it ([RunOptions]), never through
// package variables.
package command

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
)

// The one-line usages of the front ends, shared by their definitions in
// jaild-server and jaild's stand-ins for them.
const (
	ServeUsage  = "run the HTTP daemon: POST /run, streaming POST /raw, /mcp, /healthz, /metrics"
	MCPUsage    = "serve the bash and execute tools over MCP on stdin and stdout"
	RemoteUsage = "run a command on a jaild daemon, streaming its output, and exit with its exit code"
	PolicyUsage = "test a Rego policy directory (jaild policy test DIR) or decide one input with it (jaild policy eval DIR --input FILE)"
)

// Main runs the jaild command line with commands and exits with the
// outcome's status: one line on stderr for an error.
func Main(commands ...*cli.Command) {
	app := &cli.App{
		Name:            "jaild",
		Usage:           "run commands in fresh, locked-down Linux sandboxes",
		Commands:        commands,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {}, // Main decides how to exit
	}
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := ec.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "jaild:", msg)
			}
			os.Exit(ec.ExitCode())
		}
		// Anything urfave/cli reports itself is a usage error.
		fmt.Fprintln(os.Stderr, "jaild:", err)
		os.Exit(api.ExitUsage)
	}
}
