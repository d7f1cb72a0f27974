package main

import (
	"fmt"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/jail"
	"github.com/urfave/cli/v2"
)

// Exit codes of jaild run (and jaild remote): see api.Outcome, which maps
// every outcome to one.
const (
	exitInternal      = api.ExitInternal
	exitNotRoot       = api.ExitNotRoot
	exitUnsupported   = api.ExitUnsupported
	exitRootfs        = api.ExitRootfs
	exitOOM           = api.ExitOOM
	exitTimeout       = api.ExitTimeout
	exitUsage         = api.ExitUsage
	exitNotExecutable = api.ExitNotExecutable
	exitNotFound      = api.ExitNotFound
)

// exitError maps an error to a cli exit with its documented code.
func exitError(err error) error {
	return cli.Exit(err.Error(), api.ErrorOutcome(err).Exit)
}

// resultCode is the exit code that reports res.
func resultCode(res *jail.Result) int {
	return api.ResultOutcome(res).Exit
}

func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}
