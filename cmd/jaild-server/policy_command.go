package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
)

// Exit statuses of jaild policy test and jaild policy eval, as opa test's
// where they overlap: 1 is the answer "no" (a test failed, the request is
// denied), 2 the policy set itself is unusable; 125 is a usage error.
const (
	exitPolicyNo      = 1
	exitPolicyNoLoad  = 2
	maxPolicyEvalBody = 16 << 20
)

var policyCommand = &cli.Command{
	Name:  "policy",
	Usage: command.PolicyUsage,
	Description: `Tools for the Rego policy set of --policy-dir, loaded as serve and mcp load
it (the policy-runner convention's router rewritten, recursive rules refused).`,
	Subcommands: []*cli.Command{policyTestCommand, policyEvalCommand},
}

var policyTestCommand = &cli.Command{
	Name:      "test",
	Usage:     "run the Rego unit tests (test_* rules) under DIR, as opa test does",
	ArgsUsage: "DIR",
	Description: `Loads every .rego file under DIR as the daemon would and runs its test_
rules with OPA's tester; todo_ rules are skipped. Prints PASS, FAIL, ERROR or
SKIP per test and a summary.

Exit status: 0 every test passed; 1 a test failed or errored; 2 the set does
not load or holds no test; 125 usage error.`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print the tests' print() output of passing tests too"},
	},
	Action:       policyTestAction,
	OnUsageError: command.OnUsageError,
}

func policyTestAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return command.UsageError("jaild policy test takes one argument, the policy directory")
	}
	dir := c.Args().First()
	results, err := policy.Test(c.Context, dir)
	if err != nil {
		return cli.Exit(fmt.Sprintf("policy test %s: %v", dir, err), exitPolicyNoLoad)
	}
	if c.Bool("verbose") {
		for i := range results {
			if results[i].Pass && results[i].Output != "" {
				fmt.Fprintf(c.App.Writer, "%s:\n%s", results[i].Name, results[i].Output)
			}
		}
	}
	if !policy.PrintTests(c.App.Writer, results) {
		return cli.Exit("", exitPolicyNo)
	}
	return nil
}

var policyEvalCommand = &cli.Command{
	Name:      "eval",
	Usage:     "decide one input document with the policy set under DIR and print the decision",
	ArgsUsage: "DIR --input FILE|-",
	Description: `Reads an input document (JSON) from FILE or stdin, completes it as the daemon
does (resolves the command in the sandboxes' root, hashes it, parses a shell
string) and evaluates data.sandbox.main.allow. Prints the decision as JSON: allow, result
(allow, deny, deny_all, eval_error, resolve_error, parse_error), the message a
caller would get with the policy's reasons (data.sandbox.main.reasons and
deny) and, for a shell string, the command refused, the set's revision, and
the input the policy saw.

The input takes the fields of the policy's input: command, args, env, cwd,
caller, front_end, session_id, limits, background, and for shell mode shell,
either the command line or {"source": "..."}. Example:
  echo '{"command":"git","args":["status"]}' | jaild policy eval examples/policy --input -
  echo '{"shell":"git status | grep x"}' | jaild policy eval examples/policy --input -

The command is resolved where the daemon resolves it: in the sandboxes' root,
--rootfs and --state-dir as the daemon's ("host": the template under the state
dir, made there if missing, over the host's /usr; that needs root). --rootfs /
resolves on this host's own root instead, as any user may.

Exit status: 0 allowed; 1 denied (whatever the reason); 2 the set does not
load; 125 usage error (no input, input not JSON).`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: `file holding the input document, "-" for stdin (required; may follow DIR)`},
		policyShellModeFlag,
		command.SandboxWorkDirFlag,
		&cli.StringFlag{Name: "rootfs", Value: "host", EnvVars: []string{"JAILD_ROOTFS"}, Usage: `the sandboxes' root, as the daemon's: "host" (the template over the host's /usr) or a prepared DIR; / for this host's own root`},
		&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir, EnvVars: []string{"JAILD_STATE_DIR"}, Usage: "the daemon's state dir, where the template lives"},
	},
	Action:       policyEvalAction,
	OnUsageError: command.OnUsageError,
}

// evalInput is what jaild policy eval reads: policy.Input with a shell
// given as its source alone, or as the object the policy sees.
type evalInput struct {
	policy.Input
	Shell json.RawMessage `json:"shell,omitempty"`
}

func policyEvalAction(c *cli.Context) error {
	dir, input, err := evalArgs(c.Args().Slice(), c.String("input"))
	if err != nil {
		return command.UsageError("jaild policy eval: %v", err)
	}
	workDir, err := command.SandboxWorkDir(c)
	if err != nil {
		return err
	}
	in, err := readEvalInput(input, c.App.Reader, workDir)
	if err != nil {
		return command.UsageError("--input: %v", err)
	}
	shell, err := policy.ParseShellMode(c.String("policy-shell-mode"))
	if err != nil {
		return command.UsageError("--policy-shell-mode: %v", err)
	}
	root, err := sandboxResolver(c.String("rootfs"), c.String("state-dir"), workDir)
	if err != nil {
		return err
	}
	e, err := policy.Open(policy.Options{Dir: dir, Shell: shell, NoWatch: true, Resolver: root})
	if err != nil {
		return command.UsageError("%v", err)
	}
	defer e.Close()
	d := e.Decide(c.Context, "", in)
	out, err := json.MarshalIndent(evalOutput{
		Allow: d.Allow, Result: d.Result, Message: d.Message, Reasons: d.Reasons, DeniedCommand: d.DeniedCommand, ShellMode: e.Status().Shell,
		Revision: d.Revision, EvalUS: float64(d.Eval.Nanoseconds()) / 1e3, Input: d.Input,
	}, "", "  ")
	if err != nil {
		return cli.Exit(fmt.Sprintf("encode decision: %v", err), api.ExitInternal)
	}
	fmt.Fprintf(c.App.Writer, "%s\n", out)
	switch {
	case d.Result == policy.DenyAll:
		return cli.Exit("", exitPolicyNoLoad)
	case !d.Allow:
		return cli.Exit("", exitPolicyNo)
	}
	return nil
}

type evalOutput struct {
	Allow   bool          `json:"allow"`
	Result  policy.Result `json:"result"`
	Message string        `json:"message,omitempty"`
	Reasons []string      `json:"reasons,omitempty"`
	// DeniedCommand is the shell string's refused command.
	DeniedCommand string           `json:"denied_command,omitempty"`
	ShellMode     policy.ShellMode `json:"shell_mode,omitempty"`
	Revision      string           `json:"revision,omitempty"`
	EvalUS        float64          `json:"eval_us"`
	Input         *policy.Input    `json:"input"`
}

// evalArgs reads DIR and --input from what the flag parser left: urfave/cli
// stops at the first argument, and the documented form puts --input after
// DIR.
func evalArgs(args []string, input string) (dir, in string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--input" || a == "-input" || a == "-i":
			if i+1 == len(args) {
				return "", "", fmt.Errorf("%s needs a value", a)
			}
			i++
			input = args[i]
		case strings.HasPrefix(a, "--input="):
			input = strings.TrimPrefix(a, "--input=")
		case dir == "":
			dir = a
		default:
			return "", "", fmt.Errorf("unexpected argument %q", a)
		}
	}
	if dir == "" {
		return "", "", errors.New("no policy directory")
	}
	if input == "" {
		return "", "", errors.New("no --input FILE|-")
	}
	return dir, input, nil
}

// readEvalInput reads the input document from path ("-": stdin), for
// sandboxes whose working directory is workDir.
func readEvalInput(path string, stdin io.Reader, workDir string) (policy.Input, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return policy.Input{}, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPolicyEvalBody+1))
	if err != nil {
		return policy.Input{}, err
	}
	if len(data) > maxPolicyEvalBody {
		return policy.Input{}, fmt.Errorf("larger than %d bytes", maxPolicyEvalBody)
	}
	var ei evalInput
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ei); err != nil {
		return policy.Input{}, fmt.Errorf("not an input document: %w", err)
	}
	in := ei.Input
	if len(ei.Shell) > 0 && !bytes.Equal(ei.Shell, []byte("null")) {
		var src string
		if err := json.Unmarshal(ei.Shell, &src); err != nil {
			var obj struct {
				Source string `json:"source"`
			}
			if err := json.Unmarshal(ei.Shell, &obj); err != nil {
				return policy.Input{}, errors.New(`shell: want the command line, or {"source": "..."}`)
			}
			src = obj.Source
		}
		in.Shell = &policy.Shell{Source: src}
	}
	if in.Command == "" && in.Shell == nil {
		return policy.Input{}, errors.New(`no "command" and no "shell"`)
	}
	// What the daemon always sets; the author of a document may leave it out.
	if in.Cwd == "" {
		in.Cwd = workDir
	}
	return in, nil
}
