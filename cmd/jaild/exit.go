package main

import (
	"errors"
	"fmt"

	"github.com/jaild/jaild/jail"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// Exit codes of jaild run (and jaild remote). A command's own exit code
// passes through (128+N when signal N killed it); jaild's outcomes use codes
// that shells and container runtimes already use for the same ideas.
const (
	exitInternal      = 119 // the sandbox could not be built or torn down
	exitNotRoot       = 120
	exitUnsupported   = 121 // the host lacks user namespaces, cgroups, seccomp
	exitRootfs        = 122
	exitOOM           = 123
	exitTimeout       = 124 // as timeout(1)
	exitUsage         = 125 // bad flag or input, as docker run
	exitNotExecutable = 126 // as the shell
	exitNotFound      = 127
)

// exitError maps an error to a cli exit with its documented code.
func exitError(err error) error {
	code := exitInternal
	switch {
	case jail.IsInvalid(err):
		code = exitUsage
	case errors.Is(err, jail.ErrNotRoot):
		code = exitNotRoot
	case errors.Is(err, jail.ErrUnsupported):
		code = exitUnsupported
	case errors.Is(err, jail.ErrRootfs):
		code = exitRootfs
	case errors.Is(err, jail.ErrNotFound):
		code = exitNotFound
	case errors.Is(err, jail.ErrNotExecutable):
		code = exitNotExecutable
	}
	return cli.Exit(err.Error(), code)
}

// resultCode is the exit code that reports res: timeout and OOM first, then
// the command's own status.
func resultCode(res *jail.Result) int {
	switch {
	case res.TimedOut:
		return exitTimeout
	case res.OOMKilled:
		return exitOOM
	case res.Signal != "":
		return 128 + int(unix.SignalNum(res.Signal))
	}
	return res.ExitCode
}

func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}
