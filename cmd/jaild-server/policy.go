package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
)

// policyFlags are serve's and mcp's: the operator's Rego policy, consulted
// before every run.
var policyFlags = []cli.Flag{
	&cli.StringFlag{Name: "policy-dir", EnvVars: []string{"JAILD_POLICY_DIR", "POLICY_DIR"}, Usage: "directory of .rego files deciding data.sandbox.main.allow before every run; a set that does not load denies everything (default: none, every command allowed)"},
	&cli.StringFlag{Name: "policy-mode", Value: string(policy.Enforce), EnvVars: []string{"JAILD_POLICY_MODE"}, Usage: `"enforce", or "shadow": log what the policy would deny and run it anyway`},
	policyShellModeFlag,
	&cli.StringFlag{Name: "decision-log", EnvVars: []string{"JAILD_DECISION_LOG"}, Usage: `file to append one JSON line per policy decision to ("-": stderr)`},
	&cli.BoolFlag{Name: "decision-log-env", EnvVars: []string{"JAILD_DECISION_LOG_ENV"}, Usage: "put env values in the decision log (redacted otherwise: env is where callers put secrets)"},
}

// policyShellModeFlag is who decides the simple commands of a shell string.
var policyShellModeFlag = &cli.StringFlag{Name: "policy-shell-mode", Value: string(policy.ShellAuto), EnvVars: []string{"JAILD_POLICY_SHELL_MODE"},
	Usage: `shell strings: "whole" (the set decides the parse, input.shell), "each" (jaild asks data.sandbox.main.allow per simple command, as argv, and refuses anything dynamic: for sets written for argv requests), or "auto": each for a set that routes on data.sandbox[input.command] and never reads input.shell`}

// readPolicyOptions reads the policy flags: the options of the
// --policy-dir engine but its resolver (see openPolicy), or nil without
// one.
func readPolicyOptions(c *cli.Context, log *slog.Logger) (*policy.Options, error) {
	dir := c.String("policy-dir")
	if dir == "" {
		return nil, nil
	}
	mode, err := policy.ParseMode(c.String("policy-mode"))
	if err != nil {
		return nil, command.UsageError("--policy-mode: %v", err)
	}
	shell, err := policy.ParseShellMode(c.String("policy-shell-mode"))
	if err != nil {
		return nil, command.UsageError("--policy-shell-mode: %v", err)
	}
	return &policy.Options{
		Dir:    dir,
		Mode:   mode,
		Shell:  shell,
		Logger: log.With("part", "policy"),
		LogEnv: c.Bool("decision-log-env"),
	}, nil
}

// openPolicy opens the engine of o, or returns nil if o is nil, with its
// decisions appended to --decision-log ("-": stderr). A set that fails to
// load is no error: the engine starts in deny-all and recovers on the
// first valid edit. obs, if not nil, gets the decisions and loads (the
// daemon's metrics).
func openPolicy(c *cli.Context, o *policy.Options, obs policy.Observer) (*policy.Engine, func(), error) {
	if o == nil {
		return nil, func() {}, nil
	}
	opts := *o
	opts.Observer = obs
	// Commands resolve as the sandboxes see them, with the working
	// directory where the sandboxes have it: in a prepared root (--rootfs
	// DIR), or in the generated template with the host paths it binds
	// (/usr, ...), so that a host file no sandbox can see resolves as
	// not found. The template is made if missing: after the worker,
	// whose Manager checks the state dir first.
	workDir, err := command.SandboxWorkDir(c)
	if err != nil {
		return nil, nil, err
	}
	if opts.Resolver, err = sandboxResolver(c.String("rootfs"), c.String("state-dir"), workDir); err != nil {
		return nil, nil, err
	}
	var dlog io.WriteCloser
	switch path := c.String("decision-log"); path {
	case "":
	case "-":
		dlog = nopCloser{os.Stderr}
	default:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, cli.Exit(fmt.Sprintf("open decision log: %v", err), api.ExitInternal)
		}
		dlog = f
	}
	if dlog != nil {
		opts.DecisionLog = dlog
	}
	e, err := policy.Open(opts)
	if err != nil {
		if dlog != nil {
			dlog.Close()
		}
		return nil, nil, command.UsageError("--policy-dir: %v", err)
	}
	if st := e.Status(); st.DenyAll {
		opts.Logger.Error("policy does not load: denying every run until it does", "dir", opts.Dir, "err", st.Error)
	}
	return e, func() {
		e.Close()
		if dlog != nil {
			dlog.Close()
		}
	}, nil
}

// healthOfPolicy is /healthz's view of the policy; nil without one.
func healthOfPolicy(e *policy.Engine) func() (string, bool) {
	if e == nil {
		return nil
	}
	return func() (string, bool) {
		st := e.Status()
		if st.DenyAll {
			return "deny-all: " + st.Error, false
		}
		h := fmt.Sprintf("ok %s (%s, %d files, shell %s)", st.Revision, st.Mode, st.Files, st.Shell)
		if st.Error != "" { // the directory is missing: the last good set stays
			h += "; reload failed, keeping this revision: " + st.Error
		}
		return h, true
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// sandboxResolver resolves commands in the sandboxes' root: the prepared
// directory rootfs, or ("" or "host") the template generated under
// stateDir over the host paths it binds.
func sandboxResolver(rootfs, stateDir, workDir string) (*policy.Root, error) {
	if rootfs != "" && rootfs != "host" {
		return policy.NewRoot(rootfs).WithWorkDir(workDir), nil
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, command.UsageError("--state-dir: %v", err)
	}
	r, err := jail.HostRoot(abs, workDir)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("the policy resolves commands in the sandboxes' root (--rootfs / for this host's own): %v", err), api.ExitRootfs)
	}
	return policy.NewRoot(r.Dir, r.Binds()...).WithWorkDir(workDir), nil
}
