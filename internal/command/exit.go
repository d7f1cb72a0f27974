package command

import (
	"fmt"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
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

// ExitError maps an error to a cli exit with its documented code.
func ExitError(err error) error {
	return cli.Exit(err.Error(), api.ErrorOutcome(err).Exit)
}

// ResultCode is the exit code that reports res.
func ResultCode(res *box.Result) int {
	return api.ResultOutcome(res).Exit
}

func UsageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}
