package policy

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// ParseError is a shell string that does not parse: it is denied, as what
// cannot be read cannot be judged.
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return "Failed to parse shell command: " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// maxShellDepth bounds sh -c 'sh -c "..."' nesting.
const maxShellDepth = 8

// ParseShell lists every simple command of src with bash's grammar, a
// superset of POSIX sh's, so nothing that dash or bash would run is
// missed. Paths and hashes are left to Complete.
//
// Wrappers that run their arguments as a command are unwrapped to the
// command they run, which is listed with the wrapper in Via: env, exec,
// command, builtin, nohup, timeout, nice, stdbuf, setsid, time, busybox and
// a shell (sh, bash, dash...) with a literal -c script, which is parsed in
// turn. What cannot be seen is marked dynamic: a command name that is not
// a literal (including globs and brace expansions), eval, source and .,
// trap, alias, xargs, fc, a shell reading a script or stdin, a wrapper
// option this parser does not know, and an assignment to PATH, ENV,
// BASH_ENV or LD_* (which change what a name resolves to or what runs
// before it).
func ParseShell(src string) (*Shell, error) {
	sh := &Shell{Source: src, Commands: []Command{}, Functions: []Function{}}
	if err := sh.parse(src, nil, 0); err != nil {
		return nil, err
	}
	return sh, nil
}

func (sh *Shell) dynamic(format string, args ...any) {
	sh.Dynamic = true
	r := fmt.Sprintf(format, args...)
	for _, have := range sh.Reasons {
		if have == r {
			return
		}
	}
	sh.Reasons = append(sh.Reasons, r)
}

func (sh *Shell) parse(src string, via []string, depth int) error {
	if depth > maxShellDepth {
		sh.dynamic("sh -c nested deeper than %d", maxShellDepth)
		return nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		if depth > 0 { // the inner shell would fail; still, do not guess
			sh.dynamic("sh -c script does not parse: %v", err)
			return nil
		}
		return &ParseError{Err: err}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			for _, a := range n.Assigns {
				sh.assign(a)
			}
			if len(n.Args) > 0 {
				sh.call(n.Args, via, depth)
			}
		case *syntax.FuncDecl:
			fn := Function{Name: n.Name.Value, Calls: []string{}}
			syntax.Walk(n.Body, func(m syntax.Node) bool {
				if c, ok := m.(*syntax.CallExpr); ok && len(c.Args) > 0 {
					if name, ok := literal(c.Args[0]); ok {
						fn.Calls = append(fn.Calls, name)
					}
				}
				return true
			})
			sh.Functions = append(sh.Functions, fn)
		case *syntax.DeclClause:
			for _, a := range n.Args {
				if a.Name == nil && a.Value != nil {
					s, ok := literal(a.Value)
					if !ok {
						sh.dynamic("%s with a name that is not a literal", n.Variant.Value)
						continue
					}
					if name, _, ok := strings.Cut(s, "="); ok && sensitive(name) {
						sh.dynamic("assignment to %s", name)
					}
					continue
				}
				sh.assign(a)
			}
		}
		return true
	})
	return nil
}

// sensitive names are the variables that change which file a command
// name runs or what runs with it.
func sensitive(name string) bool {
	return name == "PATH" || name == "ENV" || name == "BASH_ENV" || strings.HasPrefix(name, "LD_")
}

func (sh *Shell) assign(a *syntax.Assign) {
	if a.Name != nil && sensitive(a.Name.Value) {
		sh.dynamic("assignment to %s", a.Name.Value)
	}
}

// call adds the simple command words, unwrapping wrappers.
func (sh *Shell) call(words []*syntax.Word, via []string, depth int) {
	args := make([]string, len(words))
	lit := make([]bool, len(words))
	dyn := false
	for i, w := range words {
		args[i], lit[i] = literal(w)
		if !lit[i] {
			args[i] = source(w)
			if i > 0 {
				dyn = true
			}
		}
	}
	via = append([]string(nil), via...)
	exe := ""
	for {
		if !lit[0] {
			sh.dynamic("command name %s is not a literal", args[0])
			sh.Commands = append(sh.Commands, Command{Command: args[0], Args: args[1:], Via: via, Dynamic: true})
			return
		}
		name := args[0]
		if strings.ContainsAny(name, "*?[{~") {
			sh.dynamic("command name %s would be expanded", name)
			sh.Commands = append(sh.Commands, Command{Command: name, Args: args[1:], Via: via, Dynamic: true})
			return
		}
		base := path.Base(name)
		switch base {
		case "eval", "source", ".", "trap", "alias", "xargs", "fc", "enable", "coproc":
			sh.dynamic("%s runs a command that is not in the source", base)
		case "read", "printf", "getopts", "mapfile", "readarray", "let", "hash":
			for _, a := range args[1:] {
				n, _, _ := strings.Cut(a, "=")
				n, _, _ = strings.Cut(n, "[")
				if sensitive(n) || base == "hash" && a == "-p" {
					sh.dynamic("%s may set %s", base, n)
				}
			}
		}
		if shells[base] {
			if script, ok := shellScript(args[1:], lit[1:]); ok {
				sh.parse(script, append(via, base+" -c"), depth+1)
				// The shell itself is listed too: a policy may not want
				// a shell at all.
			} else {
				sh.dynamic("%s runs a script that is not a literal -c string", base)
			}
		}
		skip, ok := unwrap(base, args[1:])
		if !ok {
			sh.dynamic("%s with options this parser does not know", base)
		}
		if skip < 0 || !ok || 1+skip >= len(args) {
			break // not a wrapper, or nothing to run: the command itself
		}
		for _, a := range args[1 : 1+skip] {
			if n, _, ok := strings.Cut(a, "="); ok && base == "env" && sensitive(n) {
				sh.dynamic("assignment to %s", n)
			}
		}
		if base == "busybox" && exe == "" {
			exe = name
		}
		via = append(via, base)
		args, lit = args[1+skip:], lit[1+skip:]
	}
	if exe == "" {
		exe = args[0]
	}
	sh.Commands = append(sh.Commands, Command{Command: args[0], Args: args[1:], Via: via, Dynamic: dyn, exe: exe})
}

// shells are the programs that run a -c string as a script.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "ksh": true, "mksh": true, "zsh": true, "rbash": true}

// shellScript finds the script of sh [options] -c SCRIPT [name args...].
func shellScript(args []string, lit []bool) (string, bool) {
	for i, a := range args {
		if !lit[i] || !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
			return "", false
		}
		if a == "--" {
			return "", false
		}
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.Contains(a, "c") {
			if i+1 < len(args) && lit[i+1] {
				return args[i+1], true
			}
			return "", false
		}
	}
	return "", false
}

// unwrap returns how many of a wrapper's arguments come before the command
// it runs: -1 if name is no wrapper, ok false if an option is not known.
func unwrap(name string, args []string) (skip int, ok bool) {
	// opts: options that take a value as the next argument; flags: those
	// that do not. A word with = after a value option's long name is one.
	var opts, flags string
	pre := 0 // positional arguments before the command (timeout's duration)
	switch name {
	case "env":
		opts, flags = " -u --unset -C --chdir ", " -i - --ignore-environment -0 --null -v --debug "
	case "exec":
		opts, flags = " -a ", " -c -l "
	case "command":
		flags = " -p -v -V "
	case "builtin", "nohup", "time":
		if name == "time" {
			opts, flags = " -o --output -f --format ", " -p -v --verbose -a --append -q --quiet "
		}
	case "timeout":
		opts, flags = " -s --signal -k --kill-after ", " --preserve-status --foreground -v --verbose "
		pre = 1
	case "nice":
		opts, flags = " -n --adjustment ", ""
	case "stdbuf":
		opts = " -i -o -e --input --output --error "
	case "setsid":
		flags = " -c --ctty -f --fork -w --wait "
	case "busybox":
		if len(args) > 0 && strings.HasPrefix(args[0], "-") {
			return -1, true // busybox --list, --install: busybox itself
		}
		return 0, true
	default:
		return -1, true
	}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if name == "env" && strings.Contains(a, "=") && !strings.HasPrefix(a, "-") {
			continue // NAME=VALUE
		}
		if !strings.HasPrefix(a, "-") || a == "-" && name != "env" {
			break
		}
		long, _, hasValue := strings.Cut(a, "=")
		switch {
		case strings.Contains(flags, " "+a+" "):
		case strings.Contains(opts, " "+a+" "):
			i++
		case hasValue && strings.Contains(opts, " "+long+" "):
		case len(a) > 2 && a[1] != '-' && strings.Contains(opts, " "+a[:2]+" "):
			// -n5, -oL: the value joined to the option
		case name == "nice" && len(a) > 1 && strings.Trim(a[1:], "0123456789") == "":
			// nice -10
		default:
			return 0, false
		}
	}
	i += pre
	return i, true
}

// literal returns the word's value if it has one before the shell runs:
// plain text, quoted or escaped, with no expansion in it.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false // $'...' escapes: not worth decoding
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescape(l.Value, true))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescape removes the shell's backslashes: before any character outside
// quotes, before $ ` " \ and newline inside double quotes.
func unescape(s string, quoted bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		c := s[i+1]
		switch {
		case c == '\n':
			i++
		case !quoted || strings.IndexByte("$`\"\\", c) >= 0:
			b.WriteByte(c)
			i++
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func source(n syntax.Node) string {
	var buf bytes.Buffer
	if err := syntax.NewPrinter().Print(&buf, n); err != nil {
		return "?"
	}
	return buf.String()
}
