package api

import (
	"context"
	"errors"
	"strings"

	"github.com/jaild/jaild/box"
)

// ErrDenied is a run the operator's policy refused; the error returned is
// a *DeniedError, which matches it with errors.Is.
var ErrDenied = errors.New("policy denied the command")

// DeniedError is a policy's refusal, with the message the caller gets
// ("Command not allowed: rm", "Policy deny-all is active: ...") and what
// the policy said of it.
type DeniedError struct {
	Message string
	// Reasons are the policy's own explanations; none when it gives none.
	Reasons []string
	// DeniedCommand is the simple command of a shell string that was
	// refused; empty for an argv request or when no one command was.
	DeniedCommand string
}

// Denial is what the wire carries of e beside the message; nil when the
// policy said nothing more.
func (e *DeniedError) Denial() *Denial {
	if e.DeniedCommand == "" && len(e.Reasons) == 0 {
		return nil
	}
	return &Denial{Reasons: e.Reasons, DeniedCommand: e.DeniedCommand}
}

// Error is Message, then a line "refused: <command>" and a line
// "reason: <reason>" per reason, if any: the first line is always the
// message alone.
func (e *DeniedError) Error() string {
	if e.DeniedCommand == "" && len(e.Reasons) == 0 {
		return e.Message
	}
	var b strings.Builder
	b.WriteString(e.Message)
	if e.DeniedCommand != "" {
		b.WriteString("\nrefused: " + e.DeniedCommand)
	}
	for _, r := range e.Reasons {
		b.WriteString("\nreason: " + r)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Exit statuses of jaild run and jaild remote. A command's own exit status
// passes through (128+N when signal N killed it); jaild's outcomes use codes
// that shells and container runtimes already use for the same ideas.
const (
	ExitInternal      = 119 // the sandbox could not be built or torn down
	ExitNotRoot       = 120
	ExitUnsupported   = 121 // the host lacks user namespaces, cgroups, seccomp
	ExitRootfs        = 122
	ExitOOM           = 123
	ExitTimeout       = 124 // as timeout(1)
	ExitUsage         = 125 // bad flag or input, as docker run
	ExitNotExecutable = 126 // as the shell
	ExitNotFound      = 127
)

// Outcome is how every front end reports one way a run can fail: the error
// code of the HTTP answer and the /raw error event, the verdict of the audit
// log and the metrics, the HTTP status, and the exit status of jaild run
// and jaild remote. The table below is the one place that sorts errors.
type Outcome struct {
	Code    string
	Verdict string
	// Status is the HTTP status code. (Numbers, not net/http's names:
	// the lean jaild, which is every sandbox's init, links this package
	// but not net/http.)
	Status int
	Exit   int
}

// outcomes maps errors to outcomes, first match wins; an error that matches
// none is CodeInternal.
var outcomes = []struct {
	is func(error) bool
	o  Outcome
}{
	{box.IsInvalid, Outcome{CodeInvalid, VerdictInvalid, 400, ExitUsage}},
	{isErr(box.ErrBusy), Outcome{CodeBusy, VerdictBusy, 429, ExitInternal}},
	{isErr(box.ErrUnavailable), Outcome{CodeUnavailable, VerdictError, 503, ExitInternal}},
	// No process left in the sandboxes' pids budget: the host, not this
	// caller's rate, is at capacity.
	{isErr(box.ErrPidsBudget), Outcome{CodeCapacity, VerdictBusy, 503, ExitInternal}},
	{isErr(ErrDenied), Outcome{CodePolicyDenied, VerdictDenied, 403, ExitUsage}},
	{isErr(box.ErrCommandNotFound), Outcome{CodeCommandNotFound, VerdictNotFound, 422, ExitNotFound}},
	{isErr(box.ErrNotFound), Outcome{CodeNotFound, VerdictNotFound, 404, ExitUsage}},
	{isErr(box.ErrSessionLost), Outcome{CodeSessionLost, VerdictNotFound, 410, ExitUsage}},
	{isErr(box.ErrLimit), Outcome{CodeLimit, VerdictRejected, 409, ExitUsage}},
	{isErr(box.ErrNotExecutable), Outcome{CodeNotExecutable, VerdictNotExecutable, 422, ExitNotExecutable}},
	// A run ended by its caller, or by the daemon closing under it.
	{isErr(context.Canceled), Outcome{CodeCanceled, VerdictCanceled, 503, ExitInternal}},
	{isErr(context.DeadlineExceeded), Outcome{CodeCanceled, VerdictCanceled, 503, ExitInternal}},
	{isErr(box.ErrClosed), Outcome{CodeCanceled, VerdictCanceled, 503, ExitInternal}},
	{isErr(box.ErrNotRoot), Outcome{CodeNotRoot, VerdictError, 500, ExitNotRoot}},
	{isErr(box.ErrUnsupported), Outcome{CodeUnsupported, VerdictError, 500, ExitUnsupported}},
	{isErr(box.ErrRootfs), Outcome{CodeRootfs, VerdictError, 500, ExitRootfs}},
	// A state dir other users could change: the operator's to fix.
	{isErr(box.ErrUntrusted), Outcome{CodeInternal, VerdictError, 500, ExitUsage}},
}

var internal = Outcome{CodeInternal, VerdictError, 500, ExitInternal}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// ErrorOutcome is the outcome of a run that failed with err (not nil).
func ErrorOutcome(err error) Outcome {
	for _, row := range outcomes {
		if row.is(err) {
			return row.o
		}
	}
	return internal
}

// CodeOutcome is the outcome behind an error code a daemon answered with,
// for a client. Codes of requests refused before they became runs (bad
// JSON, authentication, ...) are the caller's mistake: ExitUsage.
func CodeOutcome(code string) Outcome {
	for _, row := range outcomes {
		if row.o.Code == code {
			return row.o
		}
	}
	switch code {
	case CodeBadJSON, CodeTooLarge, CodeUnsupportedMedia, CodeBodyTimeout, CodeUnauthorized, CodeForbidden:
		return Outcome{code, VerdictRejected, 0, ExitUsage}
	}
	return internal
}

// ResultOutcome is the verdict and exit status of a run that ended (err
// nil). The verdict names what ended it first, else its own status; the
// exit status puts a timeout and an OOM kill before the command's own
// status (a shell may exit 0 after its child was OOM-killed), and reports
// a signal N as 128+N, as a shell does.
func ResultOutcome(res *box.Result) Outcome {
	o := Outcome{Status: 200}
	switch {
	case res.TimedOut:
		o.Verdict = VerdictTimedOut
	case res.Canceled:
		o.Verdict = VerdictCanceled
	case res.OOMKilled:
		o.Verdict = VerdictOOMKilled
	case res.PidsLimitHit:
		o.Verdict = VerdictPidsLimit
	case res.Signal != "" || res.ExitCode < 0:
		o.Verdict = VerdictSignaled
	case res.ExitCode != 0:
		o.Verdict = VerdictExitNonzero
	default:
		o.Verdict = VerdictOK
	}
	switch {
	case res.TimedOut:
		o.Exit = ExitTimeout
	case res.OOMKilled:
		o.Exit = ExitOOM
	case res.Signal != "":
		o.Exit = 128 + linuxSignals[res.Signal]
	default:
		o.Exit = res.ExitCode
	}
	return o
}

// RunOutcome is ResultOutcome or ErrorOutcome, as err says.
func RunOutcome(res *box.Result, err error) Outcome {
	if err != nil {
		return ErrorOutcome(err)
	}
	if res == nil {
		return internal
	}
	return ResultOutcome(res)
}

// linuxSignals are the numbers of the signals a sandbox's command can die
// of, as Linux numbers them on amd64 and arm64 (where sandboxes run),
// whatever the platform of the client that reads the result; an unknown
// name counts as 0.
var linuxSignals = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6,
	"SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12,
	"SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGSTKFLT": 16, "SIGCHLD": 17, "SIGCONT": 18,
	"SIGSTOP": 19, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22, "SIGURG": 23, "SIGXCPU": 24,
	"SIGXFSZ": 25, "SIGVTALRM": 26, "SIGPROF": 27, "SIGWINCH": 28, "SIGIO": 29, "SIGPWR": 30,
	"SIGSYS": 31,
}
