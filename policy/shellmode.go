package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ShellMode says who decides a shell string's simple commands.
type ShellMode string

const (
	// ShellAuto is ShellEach for a set that routes on input.command
	// (data.sandbox[input.command], the policy-runner convention's
	// router) and never reads input.shell, and ShellWhole for any other.
	ShellAuto ShellMode = "auto"
	// ShellWhole asks Query once, about the shell that runs the string,
	// with input.shell: the set judges the parse.
	ShellWhole ShellMode = "whole"
	// ShellEach has jaild ask Query once per simple command of the
	// string, each as an argv request (its command, path, hash,
	// writable, args; no input.shell), and allow the string only when
	// nothing in it is dynamic and every command is allowed: a set
	// written for argv requests decides shell strings unchanged.
	ShellEach ShellMode = "each"
)

// ParseShellMode reads a --policy-shell-mode value; "" is ShellAuto.
func ParseShellMode(s string) (ShellMode, error) {
	switch ShellMode(s) {
	case ShellAuto, ShellWhole, ShellEach:
		return ShellMode(s), nil
	case "":
		return ShellAuto, nil
	}
	return "", fmt.Errorf("policy shell mode %q: want auto, whole or each", s)
}

// shellMode is the mode a set is decided in under m.
func shellMode(m ShellMode, mods map[string]*ast.Module) ShellMode {
	if m != ShellAuto && m != "" {
		return m
	}
	if routesOnCommand(mods) && !readsShell(mods) {
		return ShellEach
	}
	return ShellWhole
}

// routesOnCommand reports whether a module refers to a command package
// by input.command, as data.sandbox[input.command] (rewritten).
func routesOnCommand(mods map[string]*ast.Module) bool {
	found := false
	cmd := ast.MustParseRef("input.command")
	for _, m := range mods {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if len(r) >= 3 && r[0].Equal(ast.DefaultRootDocument) && r[1].Equal(ast.StringTerm(commandRoot)) {
				if k, ok := r[2].Value.(ast.Ref); ok && k.Equal(cmd) {
					found = true
				}
			}
			return found
		})
	}
	return found
}

// readsShell reports whether a module may read input.shell: refers to
// it, to input with a key that is not a constant, or to input whole (as
// an argument, object.union(input, ...)). The targets of with are
// skipped: tests replace input without reading it.
func readsShell(mods map[string]*ast.Module) bool {
	found := false
	check := func(r ast.Ref) {
		if !r[0].Equal(ast.InputRootDocument) {
			return
		}
		if len(r) == 1 {
			found = true
			return
		}
		if k, ok := r[1].Value.(ast.String); !ok || k == "shell" {
			found = true
		}
	}
	for _, m := range mods {
		vis := ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.With:
				ast.WalkRefs(x.Value, func(r ast.Ref) bool { check(r); return found })
				return true // not its target
			case ast.Ref:
				check(x)
			}
			return found
		})
		vis.Walk(m)
		if found {
			return true
		}
	}
	return false
}

// decideEach decides a completed shell input in the ShellEach mode.
func (st *state) decideEach(ctx context.Context, in *Input) answer {
	deny := func(denied string, reasons ...string) answer {
		return answer{result: Denied, message: "Command not allowed: " + in.Shell.Source, reasons: reasons, denied: denied}
	}
	if in.Shell.Dynamic {
		denied := ""
		for _, c := range in.Shell.Commands {
			if c.Dynamic {
				denied = c.String()
				break
			}
		}
		reasons := make([]string, len(in.Shell.Reasons))
		for i, r := range in.Shell.Reasons {
			reasons[i] = "not decidable before it runs: " + r
		}
		return deny(denied, reasons...)
	}
	if len(in.Shell.Commands) == 0 {
		return deny("", "no command to decide")
	}
	cached := true
	for _, c := range in.Shell.Commands {
		if c.Dynamic {
			return deny(c.String(), "not decidable before it runs: an argument of "+c.Command+" is expanded by the shell")
		}
		one := *in
		one.Command, one.Path, one.Hash, one.Writable, one.Args, one.Shell = c.Command, c.Path, c.Hash, c.Writable, c.Args, nil
		if one.Args == nil {
			one.Args = []string{}
		}
		a := st.ask(ctx, &one, in.Shell.Source)
		cached = cached && a.cached
		if a.result != Allowed {
			if a.result == Denied {
				a.message = "Command not allowed: " + in.Shell.Source
				a.denied = c.String()
			}
			a.cached = cached
			return a
		}
	}
	return answer{result: Allowed, cached: cached}
}
