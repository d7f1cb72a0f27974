// Command jaild runs commands in fresh, locked-down Linux sandboxes built
// with libcontainer: one-shot (jaild run), as an HTTP daemon (jaild serve)
// or as an MCP server (jaild mcp).
//
// The package builds two ways. Plainly it is the complete tool, every
// command in one binary. With the jaild_lean tag it leaves out the front
// ends (serve, mcp, remote) and with them the packages they link in
// (Prometheus, the MCP SDK, net/http), whose package inits run at every
// start of the binary, about 3 ms here. That cost counts twice per one-shot
// sandbox, since libcontainer starts the binary again as the container's
// init. The lean build's serve, mcp and remote execute the complete build,
// installed as jaild-server next to it (see frontend_lean.go).
// scripts/setup.sh builds the pair into bin/.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// The one-line usages of the front ends, shared by their definitions and
// the lean build's stand-ins.
const (
	serveUsage  = "run the HTTP daemon: POST /run, streaming POST /raw, /mcp, /healthz, /metrics"
	mcpUsage    = "serve the bash and execute tools over MCP on stdin and stdout"
	remoteUsage = "run a command on a jaild daemon, streaming its output, and exit with its exit code"
)

func main() {
	app := &cli.App{
		Name:  "jaild",
		Usage: "run commands in fresh, locked-down Linux sandboxes",
		Commands: []*cli.Command{
			runCommand,
			doctorCommand,
			mcpCommand,
			serveCommand,
			remoteCommand,
		},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {}, // main decides how to exit
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
		os.Exit(exitUsage)
	}
}
