package policy

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// ParseError is a shell string that does not parse: it is denied, as what
// cannot be read cannot be judged.
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return "Failed to parse shell command: " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// maxShellDepth bounds sh -c 'sh -c "..."' nesting.
const maxShellDepth = 8

// ParseShell lists every simple command of src as shell, the shell that
// runs it (a path or a name: its base name picks the grammar), would parse
// it. Paths and hashes are left to Complete; a shell that src runs with -c
// is taken by its name.
//
// The grammar is the running shell's: mvdan/sh's POSIX grammar for dash,
// bash's for bash. Neither is a safe stand-in for the other: bash reads
// ((id)) as arithmetic where dash runs id in a nested subshell, and dash
// reads echo a &>f id as "echo a &" then ">f id". For a shell whose grammar
// is not known exactly (sh that is no link to dash or bash, ash, busybox)
// the string must parse in both, and what either lists is listed. A shell
// with no grammar here (zsh, ksh) is a parse error. A string that does not
// parse in its grammar is a ParseError at any depth, never parsed again in
// another.
//
// Wrappers that run their arguments as a command are unwrapped to the
// command they run, which is listed with the wrapper in Via: env, exec,
// command, builtin, nohup, timeout, nice, stdbuf, setsid, time, busybox,
// find's -exec, -execdir, -ok and -okdir, and a shell (sh, bash, dash...)
// with a literal -c script, which is parsed in turn. What cannot be seen
// is marked dynamic (see the Reasons): a command name that is not a
// literal (including globs and brace expansions); eval, source and .,
// trap, alias, xargs, fc, enable, bind, complete and compgen with -C or -F,
// mapfile -C; a shell reading a script or stdin; a wrapper option this
// parser does not know; an assignment to a variable that changes what a
// name resolves to or what runs with it (see sensitive), or a name that is
// not a literal where a builtin takes one; a relative path with a slash
// after cd. Under bash's grammar, also whatever makes bash evaluate a
// string as arithmetic, where a[$(id)] runs id: arithmetic on anything but
// number literals ($((x)), ((...)), let, for ((...)), [[ x -eq y ]], array
// subscripts and ${a:x:y}), declare -i, namerefs (declare -n), indirect
// expansion ${!x} and prompt expansion ${x@P}. dash's arithmetic reads a
// variable's value as a number only, and its test and bash's [ / test read
// -eq operands so too: these are not dynamic.
func ParseShell(src, shell string) (*Shell, error) {
	p := &parser{sh: newShell(src), resolve: func(name string) string { return name }}
	return p.run(src, shell)
}

// parseInput parses in.Shell.Source for in.Command, the shell that runs
// it. The grammar comes from the file that runs, as r resolves it (on
// Debian /bin/sh is dash; elsewhere it may be bash); shells that the
// string runs with -c are resolved the same way. vr is Complete's
// resolver for the same decision: when it is Root's batch, the shells are
// resolved through it (as r.Resolve does, in a fresh sandbox's view), so
// that the checks of their cached answers are shared with the commands'.
func parseInput(in *Input, r Resolver, vr ViewResolver, pathEnv string) (*Shell, error) {
	resolve := func(name string) string {
		if file, _, err := r.Resolve(name, pathEnv, in.Cwd); err == nil {
			return file
		}
		return name
	}
	if b, ok := vr.(*rootBatch); ok && b.r == r {
		resolve = func(name string) string {
			if res, err := b.ResolveIn("", name, pathEnv, in.Cwd); err == nil {
				return res.Path
			}
			return name
		}
	}
	p := &parser{sh: newShell(in.Shell.Source), resolve: resolve}
	return p.run(in.Shell.Source, in.Command)
}

func newShell(src string) *Shell {
	return &Shell{Source: src, Commands: []Command{}, Functions: []Function{}}
}

// parser holds one string's parse: the Shell it fills, the first parse
// error (at any depth), and how a shell's name becomes the file whose
// grammar it uses.
type parser struct {
	sh      *Shell
	err     error
	resolve func(name string) string
}

func (p *parser) run(src, shell string) (*Shell, error) {
	p.parse(src, p.resolve(shell), nil, 0)
	if p.err != nil {
		return nil, p.err
	}
	p.afterCd()
	return p.sh, nil
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

// grammars returns the grammars a shell file parses its scripts in, by its
// base name: its own, both POSIX's and bash's where which one is not known
// (sh that resolves to neither, ash, busybox's sh), nil for a shell whose
// grammar mvdan/sh does not have.
func grammars(shell string) []syntax.LangVariant {
	switch path.Base(shell) {
	case "dash":
		return []syntax.LangVariant{syntax.LangPOSIX}
	case "bash", "rbash":
		return []syntax.LangVariant{syntax.LangBash}
	case "sh", "ash", "busybox":
		return []syntax.LangVariant{syntax.LangPOSIX, syntax.LangBash}
	}
	return nil
}

// parse lists src's commands as the shell file shell would run them.
func (p *parser) parse(src, shell string, via []string, depth int) {
	sh := p.sh
	if depth > maxShellDepth {
		sh.dynamic("sh -c nested deeper than %d", maxShellDepth)
		return
	}
	langs := grammars(shell)
	if langs == nil {
		if depth == 0 {
			p.err = &ParseError{Err: fmt.Errorf("no grammar known for the shell %s", shell)}
			return
		}
		sh.dynamic("%s runs a script in a grammar this parser does not have", path.Base(shell))
		return
	}
	cmds, fns := len(sh.Commands), len(sh.Functions)
	for i, lang := range langs {
		f, err := parseIn(lang, src)
		if err != nil {
			if depth > 0 {
				err = fmt.Errorf("%s script: %w", strings.Join(via, ": "), err)
			}
			if p.err == nil {
				p.err = &ParseError{Err: err}
			}
			return
		}
		n, m := len(sh.Commands), len(sh.Functions)
		p.walk(f, lang == syntax.LangBash, via, depth)
		if i > 0 { // what the grammars agree on is listed once
			sh.Commands = append(sh.Commands[:n], slices.DeleteFunc(sh.Commands[n:], func(c Command) bool {
				return slices.ContainsFunc(sh.Commands[cmds:n], c.equal)
			})...)
			sh.Functions = append(sh.Functions[:m], slices.DeleteFunc(sh.Functions[m:], func(f Function) bool {
				return slices.ContainsFunc(sh.Functions[fns:m], func(g Function) bool {
					return f.Name == g.Name && slices.Equal(f.Calls, g.Calls)
				})
			})...)
		}
	}
}

// parsers keeps mvdan/sh's parsers, POSIX's and bash's, for reuse: a
// parser is 2.6 KB, more than the rest of a short string's parse
// allocates, and a parser may be reused once its Parse has returned.
var parsers = [2]sync.Pool{
	{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX)) }},
	{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }},
}

// parseIn parses src in the grammar lang.
func parseIn(lang syntax.LangVariant, src string) (*syntax.File, error) {
	var pool *sync.Pool
	switch lang {
	case syntax.LangPOSIX:
		pool = &parsers[0]
	case syntax.LangBash:
		pool = &parsers[1]
	default:
		return syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(src), "")
	}
	p := pool.Get().(*syntax.Parser)
	defer pool.Put(p)
	return p.Parse(strings.NewReader(src), "")
}

func (c Command) equal(d Command) bool {
	return c.Command == d.Command && c.exe == d.exe && c.Dynamic == d.Dynamic &&
		slices.Equal(c.Args, d.Args) && slices.Equal(c.Via, d.Via)
}

// walk lists f's commands; bash says f was parsed with bash's grammar, for
// what only bash evaluates.
func (p *parser) walk(f *syntax.File, bash bool, via []string, depth int) {
	sh := p.sh
	syntax.Walk(f, func(n syntax.Node) bool {
		if p.err != nil {
			return false
		}
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) > 0 {
				p.call(n.Args, bash, via, depth)
			}
		case *syntax.Assign:
			p.assign(n, bash)
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
			p.decl(n, bash)
		case *syntax.ParamExp:
			p.paramExp(n, bash)
		case *syntax.ArithmExp:
			p.arithm(bash, n.X)
		case *syntax.ArithmCmd:
			p.arithm(bash, n.X)
		case *syntax.LetClause:
			p.arithm(bash, n.Exprs...)
		case *syntax.CStyleLoop:
			p.arithm(bash, n.Init, n.Cond, n.Post)
		case *syntax.BinaryTest: // [[ ]], bash's only
			switch n.Op {
			case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
				if !numberWord(n.X) || !numberWord(n.Y) {
					sh.dynamic("[[ %s ]] evaluates its operands as arithmetic", n.Op)
				}
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet {
				w, ok := n.X.(*syntax.Word)
				s, lit := "", false
				if ok {
					s, lit = literal(w)
				}
				if !lit || subscripted(s) {
					sh.dynamic("[[ -v ]] evaluates a subscript as arithmetic")
				}
			}
		}
		return true
	})
}

// arithm marks bash arithmetic dynamic unless it is made of number
// literals: bash evaluates a variable's value, and a value's subscripts,
// as arithmetic in turn, and x='a[$(id)]' then runs id. The words of a
// command substitution inside are listed as commands anyway; its output is
// evaluated too, so it is no literal either.
func (p *parser) arithm(bash bool, xs ...syntax.ArithmExpr) {
	if !bash {
		return
	}
	for _, x := range xs {
		if x != nil && !arithStatic(x) {
			p.sh.dynamic("bash arithmetic on a value that is not a number literal")
			return
		}
	}
}

func arithStatic(x syntax.ArithmExpr) bool {
	ok := true
	syntax.Walk(x, func(n syntax.Node) bool {
		if w, isWord := n.(*syntax.Word); isWord {
			if !number(w.Lit()) {
				ok = false
			}
			return false
		}
		return ok
	})
	return ok
}

// number is an integer literal of bash arithmetic: 12, 0x1f, 017, 2#101.
func number(s string) bool {
	if s == "" {
		return false
	}
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return h != "" && strings.Trim(h, "0123456789abcdef") == ""
	}
	base, digits, ok := strings.Cut(s, "#")
	if ok {
		return base != "" && strings.Trim(base, "0123456789") == "" &&
			digits != "" && strings.Trim(digits, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_") == ""
	}
	return strings.Trim(s, "0123456789") == ""
}

func numberWord(x syntax.TestExpr) bool {
	w, ok := x.(*syntax.Word)
	if !ok {
		return false
	}
	s, ok := literal(w)
	s = strings.TrimLeft(s, "+-")
	return ok && number(s)
}

// subscripted says whether a variable name as a builtin takes it
// (read, unset, printf -v, test -v...) has a subscript bash would evaluate
// as arithmetic: anything but a number, @ or *.
func subscripted(s string) bool {
	_, sub, ok := strings.Cut(s, "[")
	if !ok {
		return false
	}
	sub, _, _ = strings.Cut(sub, "]")
	return !number(sub) && sub != "@" && sub != "*"
}

func (p *parser) paramExp(pe *syntax.ParamExp, bash bool) {
	sh := p.sh
	if pe.Exp != nil && pe.Param != nil && sensitive(pe.Param.Value) &&
		(pe.Exp.Op == syntax.AssignUnset || pe.Exp.Op == syntax.AssignUnsetOrNull) {
		sh.dynamic("assignment to %s", pe.Param.Value)
	}
	if !bash {
		return
	}
	all := false // ${a[@]}, ${a[*]}
	if w, ok := pe.Index.(*syntax.Word); ok && (w.Lit() == "@" || w.Lit() == "*") {
		all = true
	}
	if pe.Index != nil && !all {
		p.arithm(bash, pe.Index)
	}
	if pe.Slice != nil {
		p.arithm(bash, pe.Slice.Offset, pe.Slice.Length)
	}
	if pe.Excl && pe.Names == 0 && !all {
		sh.dynamic("indirect expansion ${!%s} evaluates the subscript a value may hold", pe.Param.Value)
	}
	if pe.Exp != nil && pe.Exp.Op == syntax.OtherParamOps && pe.Exp.Word != nil && strings.Contains(pe.Exp.Word.Lit(), "P") {
		sh.dynamic("${%s@P} expands a value as a prompt, command substitutions included", pe.Param.Value)
	}
}

// decl checks declare, local, typeset, export, readonly.
func (p *parser) decl(d *syntax.DeclClause, bash bool) {
	sh := p.sh
	variant := d.Variant.Value
	if variant == "nameref" {
		sh.dynamic("nameref makes a name stand for another, subscripts included")
	}
	for _, a := range d.Args {
		if a.Name != nil {
			if a.Naked && sensitive(a.Name.Value) && variant != "export" && variant != "readonly" {
				sh.dynamic("%s %s makes it a new variable", variant, a.Name.Value) // local PATH empties it
			}
			continue // the rest is assign's
		}
		if a.Value == nil {
			continue
		}
		s, ok := literal(a.Value)
		if !ok {
			sh.dynamic("%s with a name that is not a literal", variant)
			continue
		}
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			if bash && strings.ContainsAny(s[1:], "in") {
				sh.dynamic("%s %s: integer variables and namerefs evaluate values bash does not show", variant, s)
			}
			continue
		}
		name, _, _ := strings.Cut(s, "=")
		if n, _, _ := strings.Cut(name, "["); sensitive(n) {
			sh.dynamic("assignment to %s", n)
		}
		if bash && subscripted(name) {
			sh.dynamic("%s evaluates the subscript of %s as arithmetic", variant, name)
		}
	}
}

// sensitive names are the variables that change which file a command name
// runs, what runs with it or before it, or what the shell evaluates: PATH;
// ENV and BASH_ENV (scripts a shell reads at start); LD_* and GCONV_PATH
// (libraries the dynamic loader and iconv load); bash's hash table and
// aliases as arrays (BASH_CMDS, BASH_ALIASES), EXECIGNORE (which files a
// name skips), BASH_LOADABLES_PATH (enable -f), PS4 (expanded, command
// substitutions and all, under set -x), PROMPT_COMMAND, SHELLOPTS and
// BASHOPTS (options a new bash starts with), BASH_FUNC_* (functions a new
// bash imports from its environment).
func sensitive(name string) bool {
	switch name {
	case "PATH", "ENV", "BASH_ENV", "GCONV_PATH", "BASH_CMDS", "BASH_ALIASES", "EXECIGNORE",
		"BASH_LOADABLES_PATH", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS":
		return true
	}
	return strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "BASH_FUNC_")
}

func (p *parser) assign(a *syntax.Assign, bash bool) {
	if a.Name == nil {
		return
	}
	if !a.Naked && sensitive(a.Name.Value) {
		p.sh.dynamic("assignment to %s", a.Name.Value)
	}
	if a.Index != nil {
		p.arithm(bash, a.Index)
	}
	if a.Array != nil {
		for _, e := range a.Array.Elems {
			if e.Index != nil {
				p.arithm(bash, e.Index)
			}
		}
	}
}

// names returns the arguments of a builtin that name variables it sets or
// tests: read's operands and -a, printf -v, getopts' name, mapfile's
// array, unset's operands, wait -p, test -v. A name there may hold a
// subscript that bash evaluates as arithmetic.
func names(base string, args []string, lit []bool) (names []string, lits []bool) {
	var valued, takes string // options with a value; those whose value is a name
	operands := func(int) bool { return true }
	switch base {
	case "read":
		valued, takes = "adinNptu", "a"
	case "printf":
		valued, takes = "v", "v"
		operands = func(int) bool { return false }
	case "getopts":
		operands = func(i int) bool { return i == 1 }
	case "mapfile", "readarray":
		valued = "dnOsuCc"
	case "unset":
	case "wait":
		valued, takes = "p", "p"
		operands = func(int) bool { return false }
	case "test", "[":
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-v" {
				names, lits = append(names, args[i+1]), append(lits, lit[i+1])
			}
		}
		return names, lits
	default:
		return nil, nil
	}
	n := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		if lit[i] && a == "--" {
			for j := i + 1; j < len(args); j++ {
				if operands(n) {
					names, lits = append(names, args[j]), append(lits, lit[j])
				}
				n++
			}
			break
		}
		if lit[i] && len(a) > 1 && a[0] == '-' {
			for k := 1; k < len(a); k++ {
				if !strings.ContainsRune(valued, rune(a[k])) {
					continue
				}
				v, vlit := a[k+1:], true
				if v == "" && i+1 < len(args) {
					i++
					v, vlit = args[i], lit[i]
				}
				if strings.ContainsRune(takes, rune(a[k])) {
					names, lits = append(names, v), append(lits, vlit)
				}
				break
			}
			continue
		}
		if operands(n) {
			names, lits = append(names, a), append(lits, lit[i])
		}
		n++
	}
	return names, lits
}

// call adds the simple command words, unwrapping wrappers.
func (p *parser) call(words []*syntax.Word, bash bool, via []string, depth int) {
	args := make([]string, len(words))
	lit := make([]bool, len(words))
	for i, w := range words {
		args[i], lit[i] = literal(w)
		if !lit[i] {
			args[i] = source(w)
		}
	}
	p.command(args, lit, bash, via, depth)
}

// command adds the command args (with lit saying which are literals) run
// behind the wrappers via.
func (p *parser) command(args []string, lit []bool, bash bool, via []string, depth int) {
	sh := p.sh
	dyn := slices.Contains(lit[1:], false)
	via = append([]string(nil), via...)
	exe := ""
	for {
		if !lit[0] {
			sh.dynamic("command name %s is not a literal", args[0])
			sh.Commands = append(sh.Commands, Command{Command: args[0], Args: args[1:], Via: via, Dynamic: true})
			return
		}
		name := args[0]
		if strings.ContainsAny(name, "*?{~") || glob(name) {
			sh.dynamic("command name %s would be expanded", name)
			sh.Commands = append(sh.Commands, Command{Command: name, Args: args[1:], Via: via, Dynamic: true})
			return
		}
		base := path.Base(name)
		p.builtin(base, args, lit, bash)
		if shells[base] {
			p.nestedShell(name, exe, args, lit, via, depth)
		}
		if base == "find" {
			p.findExec(args, lit, bash, via, depth)
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

// builtin marks dynamic what the command base runs with args (lit saying
// which are literals) that the source does not show: a command it runs
// from a string, or a variable it sets or tests whose name is no literal,
// is sensitive, or has a subscript bash evaluates.
func (p *parser) builtin(base string, args []string, lit []bool, bash bool) {
	sh := p.sh
	switch base {
	case "eval", "source", ".", "trap", "alias", "xargs", "fc", "enable", "coproc", "bind":
		sh.dynamic("%s runs a command that is not in the source", base)
	case "complete", "compgen", "mapfile", "readarray":
		for i, a := range args[1:] {
			if !lit[1+i] || strings.HasPrefix(a, "-") && strings.ContainsAny(a, "CF") {
				sh.dynamic("%s %s runs a command that is not in the source", base, a)
			}
		}
	case "hash":
		if slices.Contains(args[1:], "-p") {
			sh.dynamic("hash -p sets the file a name runs")
		}
	case "let":
		for _, a := range args[1:] {
			if n, _, _ := strings.Cut(a, "="); sensitive(n) {
				sh.dynamic("let may set %s", n)
			}
		}
	}
	vars, vlit := names(base, args[1:], lit[1:])
	for i, v := range vars {
		n, _, _ := strings.Cut(v, "=")
		n, _, _ = strings.Cut(n, "[")
		switch {
		case !vlit[i]:
			sh.dynamic("%s with a name that is not a literal", base)
		case sensitive(n) && base != "test" && base != "[":
			sh.dynamic("%s may set %s", base, n)
		case bash && subscripted(v):
			sh.dynamic("%s evaluates the subscript of %s as arithmetic", base, v)
		}
	}
}

// nestedShell parses the literal -c script of the shell name (or of
// busybox at exe, if exe is set) run with args behind the wrappers via.
// The shell itself is listed by the caller too: a policy may not want a
// shell at all.
func (p *parser) nestedShell(name, exe string, args []string, lit []bool, via []string, depth int) {
	base := path.Base(name)
	shell := p.resolve(name)
	if exe != "" {
		shell = exe // busybox sh
	}
	if script, ok := shellScript(args[1:], lit[1:]); ok {
		p.parse(script, shell, append(via, base+" -c"), depth+1)
	} else {
		p.sh.dynamic("%s runs a script that is not a literal -c string", base)
	}
}

// glob says whether name holds a bracket expression, a [ with a ] after
// it: [ and [[ alone name the test command.
func glob(name string) bool {
	i := strings.IndexByte(name, '[')
	return i >= 0 && strings.IndexByte(name[i+1:], ']') >= 0
}

// findExec lists the commands find runs for its -exec, -execdir, -ok and
// -okdir actions, each up to its ; or +.
func (p *parser) findExec(args []string, lit []bool, bash bool, via []string, depth int) {
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(args) && !(lit[j] && (args[j] == ";" || args[j] == "+")) {
			j++
		}
		if j > i+1 {
			p.command(args[i+1:j], lit[i+1:j], bash, append(via, "find"), depth)
		}
		i = j
	}
}

// afterCd marks a relative path with a slash dynamic when the string
// changes directory: it is resolved in the request's directory, and runs
// in another.
func (p *parser) afterCd() {
	cd := slices.ContainsFunc(p.sh.Commands, func(c Command) bool {
		return c.Command == "cd" || c.Command == "pushd" || c.Command == "popd"
	})
	if !cd {
		return
	}
	for _, c := range p.sh.Commands {
		if strings.Contains(c.exe, "/") && !path.IsAbs(c.exe) {
			p.sh.dynamic("%s is a relative path and the string changes directory", c.exe)
		}
	}
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
