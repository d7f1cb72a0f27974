package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/sibling"
	"github.com/jaild/jaild/jail"
)

// serverBinary is the complete build of this package, which the lean
// build's front-end commands execute. It is looked up next to the running
// binary, never in PATH.
const serverBinary = "jaild-server"

// In the lean build serve, mcp, remote, policy, session, jobs and cp are
// stand-ins that replace the process with jaild-server, so the daemon keeps
// jaild's pid (systemd's MainPID, an MCP client's child) and its stdio.
// Their flags and help are
// jaild-server's own: `jaild serve --help` prints them.
var (
	serveCommand  = frontEnd("serve", command.ServeUsage)
	mcpCommand    = frontEnd("mcp", command.MCPUsage)
	remoteCommand = frontEnd("remote", command.RemoteUsage)
	policyCommand = frontEnd("policy", command.PolicyUsage)
	// The session clients too: they link the HTTP client.
	sessionCommand = frontEnd("session", command.SessionUsage)
	jobsCommand    = frontEnd("jobs", command.JobsUsage)
	cpCommand      = frontEnd("cp", command.CpUsage)
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

// openServer opens jaild-server next to this binary, with the checks of
// sibling.Open, and returns its path and a descriptor for it.
func openServer() (string, int, error) { return sibling.Open(serverBinary) }

// execServer replaces the process with jaild-server COMMAND ARGS..., with
// the same environment; it returns only if that fails. argv[0] stays the
// path, which ps and systemd show. The new process's /proc/self/exe is the
// file itself, as with execve.
func execServer(command string, args []string) error {
	bin, fd, err := openServer()
	if err == nil {
		argv := append([]string{bin, command}, args...)
		err = sibling.Exec(fd, argv, os.Environ())
		unix.Close(fd)
	}
	return cli.Exit(fmt.Sprintf("%s is run by %s, which cannot be executed: %v (scripts/setup.sh builds it next to jaild)", command, bin, err), api.ExitInternal)
}

// frontEnds is jaild doctor's finding on jaild-server.
func frontEnds() jail.Finding {
	f := jail.Finding{Name: "front ends"}
	bin, fd, err := openServer()
	if err == nil {
		unix.Close(fd)
		err = unix.Access(bin, unix.X_OK)
	}
	if err != nil {
		f.Detail = fmt.Sprintf("serve, mcp and remote need a usable %s next to jaild: %v", serverBinary, err)
		return f
	}
	f.OK, f.Detail = true, "serve, mcp and remote run "+bin
	return f
}
