//go:build jaild_lean

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// serverBinary is the complete build of this package, which the lean
// build's front-end commands execute. It is looked up next to the running
// binary, never in PATH.
const serverBinary = "jaild-server"

// In the lean build serve, mcp and remote are stand-ins that replace the
// process with jaild-server, so the daemon keeps jaild's pid (systemd's
// MainPID, an MCP client's child) and its stdio. Their flags and help are
// jaild-server's own: `jaild serve --help` prints them.
var (
	serveCommand  = frontEnd("serve", serveUsage)
	mcpCommand    = frontEnd("mcp", mcpUsage)
	remoteCommand = frontEnd("remote", remoteUsage)
)

func frontEnd(name, usage string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           usage,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			return execServer(name, c.Args().Slice())
		},
	}
}

// execServer replaces the process with jaild-server COMMAND ARGS..., with
// the same environment; it returns only if that fails.
func execServer(command string, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit(fmt.Sprintf("%s: cannot find this binary to find %s next to it: %v", command, serverBinary, err), exitInternal)
	}
	bin := filepath.Join(filepath.Dir(exe), serverBinary)
	argv := append([]string{bin, command}, args...)
	err = unix.Exec(bin, argv, os.Environ())
	return cli.Exit(fmt.Sprintf("%s is run by %s, which cannot be executed: %v (scripts/setup.sh installs it next to jaild)", command, bin, err), exitInternal)
}
