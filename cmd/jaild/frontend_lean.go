//go:build jaild_lean

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
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

// serverPath is where jaild-server must be: next to this binary.
func serverPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find this binary to find %s next to it: %w", serverBinary, err)
	}
	return filepath.Join(filepath.Dir(exe), serverBinary), nil
}

// execServer replaces the process with jaild-server COMMAND ARGS..., with
// the same environment; it returns only if that fails.
func execServer(command string, args []string) error {
	bin, err := serverPath()
	if err == nil {
		argv := append([]string{bin, command}, args...)
		err = unix.Exec(bin, argv, os.Environ())
		err = fmt.Errorf("%s is run by %s, which cannot be executed: %w (scripts/setup.sh installs it next to jaild)", command, bin, err)
	}
	return cli.Exit(err.Error(), exitInternal)
}

// frontEnds is jaild doctor's finding on jaild-server.
func frontEnds() jail.Finding {
	f := jail.Finding{Name: "front ends"}
	bin, err := serverPath()
	if err == nil {
		err = unix.Access(bin, unix.X_OK)
	}
	if err != nil {
		f.Detail = fmt.Sprintf("serve, mcp and remote need %s next to jaild: %v", serverBinary, err)
		return f
	}
	f.OK, f.Detail = true, "serve, mcp and remote run "+bin
	return f
}
