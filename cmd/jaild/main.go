// Command jaild runs commands in fresh, locked-down Linux sandboxes built
// with libcontainer: one-shot (jaild run), as an HTTP daemon (jaild serve)
// or as an MCP server (jaild mcp).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
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
