//go:build !jaild_lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/policy"
)

// policyCommand checks a policy directory offline: its Rego unit tests,
// and the decision on one input. It is in the complete build only, as OPA
// is the heaviest of the front ends' packages.
var policyCommand = &cli.Command{
	Name:  "policy",
	Usage: policyUsage,
	Subcommands: []*cli.Command{
		{
			Name:      "test",
			Usage:     "run the Rego unit tests (test_ rules) of a policy directory, as opa test does",
			ArgsUsage: "DIR",
			Description: `Loads DIR as jaild serve would (every .rego file, recursively, with the
policy-runner router rewrite), runs each test_ rule and prints PASS or FAIL
per test and a summary. Exits 0 when all pass, 1 when one fails, 125 when
DIR does not load.`,
			OnUsageError: onUsageError,
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("policy test: want one DIR", exitUsage)
				}
				return policyTest(c.Context, c.Args().First(), os.Stdout)
			},
		},
		{
			Name:      "eval",
			Usage:     "print the decision of a policy directory on one input, with the shell parse",
			ArgsUsage: "DIR",
			Description: `Reads the input document (JSON: command or executable, args, env, cwd,
caller, front_end, session_id, limits, background, and shell, a string, in
shell mode) from --input, completes it as jaild serve would (path, hash,
the parsed shell) and prints the decision as JSON. Exits 0 when allowed, 1
when denied, 125 on a bad input.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "the input document: a FILE, or - for stdin"},
				&cli.StringFlag{Name: "rootfs", Value: "host", EnvVars: []string{"JAILD_ROOTFS"}, Usage: `resolve commands in this root: "host" (the host's /usr, as the default sandbox sees it) or a prepared DIR`},
			},
			OnUsageError: onUsageError,
			Action: func(c *cli.Context) error {
				// urfave/cli stops at the first argument: take the
				// documented order, DIR --input FILE, by hand.
				args, input := c.Args().Slice(), c.String("input")
				if len(args) == 3 && (args[1] == "--input" || args[1] == "-i") {
					args, input = args[:1], args[2]
				} else if len(args) == 2 && strings.HasPrefix(args[1], "--input=") {
					args, input = args[:1], strings.TrimPrefix(args[1], "--input=")
				}
				if len(args) != 1 || input == "" {
					return cli.Exit("policy eval: want DIR --input FILE|-", exitUsage)
				}
				return policyEval(c.Context, args[0], input, c.String("rootfs"), os.Stdout)
			},
		},
	},
}

func policyTest(ctx context.Context, dir string, w io.Writer) error {
	results, err := policy.Test(ctx, dir)
	if err != nil {
		return cli.Exit(fmt.Sprintf("policy test %s: %v", dir, err), exitUsage)
	}
	if !policy.PrintTests(w, results) {
		return cli.Exit("", 1)
	}
	return nil
}

// evalInput is policy.Input as a file spells it: shell is the string, and
// the convention's executable names the command.
type evalInput struct {
	policy.Input
	Executable string `json:"executable"`
	Shell      string `json:"shell"`
}

func policyEval(ctx context.Context, dir, input, rootfs string, w io.Writer) error {
	var data []byte
	var err error
	if input == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(input)
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("policy eval: read input: %v", err), exitUsage)
	}
	var in evalInput
	if err := json.Unmarshal(data, &in); err != nil {
		return cli.Exit(fmt.Sprintf("policy eval: input %s is not a JSON input document: %v", input, err), exitUsage)
	}
	if in.Command == "" {
		in.Command = in.Executable
	}
	if in.Shell != "" {
		in.Input.Shell = &policy.Shell{Source: in.Shell}
		in.Command, in.Args = "", nil
	}
	if in.Command == "" && in.Input.Shell == nil {
		return cli.Exit("policy eval: the input has neither command (or executable) nor shell", exitUsage)
	}
	resolver := policy.NewRoot("/")
	if rootfs != "host" {
		resolver = policy.NewRoot(rootfs)
	}
	e, err := policy.Open(policy.Options{Dir: dir, Resolver: resolver, NoWatch: true})
	if err != nil {
		return cli.Exit(fmt.Sprintf("policy eval: %v", err), exitUsage)
	}
	defer e.Close()
	d := e.Decide(ctx, "", in.Input)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(struct {
		Allow    bool          `json:"allow"`
		Result   policy.Result `json:"result"`
		Message  string        `json:"message,omitempty"`
		Revision string        `json:"revision,omitempty"`
		EvalUS   float64       `json:"eval_us"`
		Input    *policy.Input `json:"input"`
	}{d.Allow, d.Result, d.Message, d.Revision, float64(d.Eval.Nanoseconds()) / 1e3, d.Input})
	if !d.Allow {
		return cli.Exit("", 1)
	}
	return nil
}
