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
	policyCommand = frontEnd("policy", policyUsage)
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

// serverPath is where jaild-server must be: next to this binary. As jaild
// runs it as root, it must be as safe from tampering as jaild itself:
// owned by jaild's owner, writable by no one else, in a directory no one
// else may write to.
func serverPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find this binary to find %s next to it: %w", serverBinary, err)
	}
	bin := filepath.Join(filepath.Dir(exe), serverBinary)
	var self, srv, dir unix.Stat_t
	if err := unix.Stat(exe, &self); err != nil {
		return bin, fmt.Errorf("stat %s: %w", exe, err)
	}
	if err := unix.Stat(bin, &srv); err != nil {
		return bin, fmt.Errorf("stat %s: %w", bin, err)
	}
	if err := unix.Stat(filepath.Dir(bin), &dir); err != nil {
		return bin, fmt.Errorf("stat %s: %w", filepath.Dir(bin), err)
	}
	switch {
	case srv.Mode&unix.S_IFMT != unix.S_IFREG:
		return bin, fmt.Errorf("%s is not a regular file", bin)
	case srv.Uid != self.Uid:
		return bin, fmt.Errorf("%s is owned by uid %d, jaild by uid %d", bin, srv.Uid, self.Uid)
	case srv.Mode&0o022 != 0:
		return bin, fmt.Errorf("%s is writable by group or others (mode %o)", bin, srv.Mode&0o7777)
	case dir.Mode&0o002 != 0:
		return bin, fmt.Errorf("%s is writable by others (mode %o)", filepath.Dir(bin), dir.Mode&0o7777)
	}
	return bin, nil
}

// execServer replaces the process with jaild-server COMMAND ARGS..., with
// the same environment; it returns only if that fails.
func execServer(command string, args []string) error {
	bin, err := serverPath()
	if err == nil {
		argv := append([]string{bin, command}, args...)
		err = unix.Exec(bin, argv, os.Environ())
	}
	return cli.Exit(fmt.Sprintf("%s is run by %s, which cannot be executed: %v (scripts/setup.sh builds it next to jaild)", command, bin, err), exitInternal)
}

// frontEnds is jaild doctor's finding on jaild-server.
func frontEnds() jail.Finding {
	f := jail.Finding{Name: "front ends"}
	bin, err := serverPath()
	if err == nil {
		err = unix.Access(bin, unix.X_OK)
	}
	if err != nil {
		f.Detail = fmt.Sprintf("serve, mcp and remote need a usable %s next to jaild: %v", serverBinary, err)
		return f
	}
	f.OK, f.Detail = true, "serve, mcp and remote run "+bin
	return f
}
