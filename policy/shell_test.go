package policy

import (
	"errors"
	"slices"
	"testing"
)

func TestParseShell(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shell   string // bash when empty
		src     string
		want    []string // command names, in order
		dynamic bool
	}{
		{name: "list", src: "echo ok; rm -rf /", want: []string{"echo", "rm"}},
		{name: "and or", src: "a && b || c", want: []string{"a", "b", "c"}},
		{name: "pipe", src: "a | b |& c", want: []string{"a", "b", "c"}},
		{name: "subshell and group", src: "(a; { b; })", want: []string{"a", "b"}},
		{name: "command substitution", src: "echo $(rm -rf /)", want: []string{"echo", "rm"}},
		{name: "backticks", src: "echo `id`", want: []string{"echo", "id"}},
		{name: "nested substitution", src: `echo "$(a "$(b)")"`, want: []string{"echo", "a", "b"}},
		{name: "here-doc", src: "cat <<EOF\n$(rm -rf /)\nEOF\n", want: []string{"cat", "rm"}},
		{name: "quoted here-doc is text", src: "cat <<'EOF'\n$(rm -rf /)\nEOF\n", want: []string{"cat"}},
		{name: "process substitution", src: "diff <(a) >(b)", want: []string{"diff", "a", "b"}},
		{name: "function", src: "f() { rm -rf /; }; f", want: []string{"rm", "f"}},
		{name: "parameter default", src: "echo ${x:-$(rm x)}", want: []string{"echo", "rm"}},
		{name: "arithmetic on output", src: "echo $(( $(id -u) + 1 ))", want: []string{"echo", "id"}, dynamic: true},
		{name: "dash arithmetic on output", shell: "dash", src: "echo $(( $(id -u) + 1 ))", want: []string{"echo", "id"}},
		{name: "if while case", src: "if a; then b; fi; while c; do d; done; case x in y) e;; esac", want: []string{"a", "b", "c", "d", "e"}},
		{name: "quoted name", src: `'r''m' -rf /; "da"te; r\m x`, want: []string{"rm", "date", "rm"}},
		{name: "env unwrapped", src: "env -i A=1 rm -rf /", want: []string{"rm"}},
		{name: "env alone", src: "env", want: []string{"env"}},
		{name: "exec command nohup timeout nice", src: "exec command -p nohup timeout -s KILL 5 nice -n 5 rm x", want: []string{"rm"}},
		{name: "busybox", src: "busybox rm -rf /", want: []string{"rm"}},
		{name: "sh -c literal", src: `sh -c 'echo ok; rm -rf /'`, want: []string{"echo", "rm", "sh"}},
		{name: "bash -ec literal", src: `bash -ec "id"`, want: []string{"id", "bash"}},
		{name: "variable name", src: "x=rm; $x -rf /", want: []string{"$x"}, dynamic: true},
		{name: "eval", src: "eval 'rm -rf /'", want: []string{"eval"}, dynamic: true},
		{name: "source", src: ". ./x; source y", want: []string{".", "source"}, dynamic: true},
		{name: "sh -c variable", src: `sh -c "$y"`, want: []string{"sh"}, dynamic: true},
		{name: "sh reading stdin", src: "sh <<EOF\nrm -rf /\nEOF\n", want: []string{"sh"}, dynamic: true},
		{name: "exec args", src: `exec "$@"`, want: []string{`"$@"`}, dynamic: true},
		{name: "xargs", src: "echo / | xargs rm -rf", want: []string{"echo", "xargs"}, dynamic: true},
		{name: "glob name", src: "/usr/bin/r? -rf /", want: []string{"/usr/bin/r?"}, dynamic: true},
		{name: "brace name", src: "{rm,-rf,/}", want: []string{"{rm,-rf,/}"}, dynamic: true},
		{name: "PATH assignment", src: "PATH=/work; date", want: []string{"date"}, dynamic: true},
		{name: "export PATH", src: "export PATH=/work; date", want: []string{"date"}, dynamic: true},
		{name: "env LD_PRELOAD", src: "env LD_PRELOAD=/work/x.so date", want: []string{"date"}, dynamic: true},
		{name: "env -S", src: "env -S 'rm -rf /'", want: []string{"env"}, dynamic: true},
		{name: "read PATH", src: "read PATH; date", want: []string{"read", "date"}, dynamic: true},
		{name: "trap", src: "trap 'rm -rf /' EXIT", want: []string{"trap"}, dynamic: true},

		// The grammar is the running shell's.
		{name: "dash nested subshell", shell: "/usr/bin/dash", src: "((id)); echo hi", want: []string{"id", "echo"}},
		{name: "bash arithmetic command", src: "((id)); echo hi", want: []string{"echo"}, dynamic: true},
		{name: "sh both grammars", shell: "sh", src: "((id)); echo hi", want: []string{"id", "echo"}, dynamic: true},
		{name: "bash function keyword", src: "function f { id; }; f", want: []string{"id", "f"}},
		{name: "dash time", shell: "dash", src: "time id", want: []string{"id"}},
		{name: "dash coproc", shell: "dash", src: "coproc id", want: []string{"coproc"}, dynamic: true},
		{name: "dash let", shell: "dash", src: "let x=1", want: []string{"let"}},
		{name: "dash arithmetic on a variable", shell: "dash", src: "x='a[$(id)]'; echo $((x))", want: []string{"echo"}},

		// What bash evaluates as arithmetic.
		{name: "arithmetic on a variable", src: "x='a[$(id>&2)]'; echo $((x))", want: []string{"echo"}, dynamic: true},
		{name: "number arithmetic", src: "echo $((1 + 0x1f * 2#101)); ((3 > 2))", want: []string{"echo"}},
		{name: "let", src: "let y=x+1", want: nil, dynamic: true},
		{name: "for arithmetic", src: "for ((i = 0; i < 3; i++)); do date; done", want: []string{"date"}, dynamic: true},
		{name: "subscript", src: "echo ${a[i]}", want: []string{"echo"}, dynamic: true},
		{name: "all elements", src: `echo "${a[@]}" ${a[1]} ${!a[@]} ${!pre*}`, want: []string{"echo"}},
		{name: "slice", src: "echo ${s:x:1}", want: []string{"echo"}, dynamic: true},
		{name: "assigned subscript", src: "a[x]=1", dynamic: true},
		{name: "array subscript", src: "a=([x]=1)", dynamic: true},
		{name: "[[ -eq ]]", src: "[[ $x -eq 0 ]] && date", want: []string{"date"}, dynamic: true},
		{name: "[[ -eq ]] numbers", src: "[[ 1 -eq -1 ]] && date", want: []string{"date"}},
		{name: "[[ -v ]] subscript", src: "[[ -v a[$i] ]]", dynamic: true},
		{name: "[[ -v ]] name", src: "[[ -v x ]]"},
		{name: "[ -eq ] reads a number", src: `[ "$x" -eq 0 ]`, want: []string{"["}},
		{name: "test -v subscript", src: "test -v 'a[x]'", want: []string{"test"}, dynamic: true},
		{name: "declare -i", src: "declare -i n; n=$x", dynamic: true},
		{name: "local -n", src: "f() { local -n r=$1; echo $r; }", want: []string{"echo"}, dynamic: true},
		{name: "indirect", src: "echo ${!x}", want: []string{"echo"}, dynamic: true},
		{name: "prompt expansion", src: "echo ${x@P}", want: []string{"echo"}, dynamic: true},
		{name: "unset subscript", src: `unset 'a[$(id)]'`, want: []string{"unset"}, dynamic: true},
		{name: "printf -v subscript", src: `printf -v 'a[x]' %s y`, want: []string{"printf"}, dynamic: true},
		{name: "read subscript", src: `read -r 'a[x]'`, want: []string{"read"}, dynamic: true},
		{name: "read -a", src: `read -ra arr`, want: []string{"read"}},
		{name: "getopts name", src: `getopts ab: "$n" "$@"`, want: []string{"getopts"}, dynamic: true},
		{name: "mapfile -C", src: `mapfile -C id -c 1 a`, want: []string{"mapfile"}, dynamic: true},
		{name: "bind -x", src: `bind -x '"x": id'`, want: []string{"bind"}, dynamic: true},
		{name: "compgen -C", src: `compgen -C id x`, want: []string{"compgen"}, dynamic: true},
		{name: "BASH_CMDS", src: `BASH_CMDS[date]=/tmp/x; date`, want: []string{"date"}, dynamic: true},
		{name: "PS4", src: `PS4='$(id)'; set -x; true`, want: []string{"set", "true"}, dynamic: true},
		{name: "default assigns PATH", src: `: ${PATH:=/tmp}; date`, want: []string{":", "date"}, dynamic: true},
		{name: "unset PATH", src: `unset PATH; date`, want: []string{"unset", "date"}, dynamic: true},
		{name: "local PATH", src: `f() { local PATH; date; }`, want: []string{"date"}, dynamic: true},
		{name: "env BASH_FUNC", src: `env 'BASH_FUNC_date%%=() { id; }' bash -c date`, want: []string{"date", "bash"}, dynamic: true},
		{name: "find -exec", src: `find . -name x -exec id {} \; -execdir date +`, want: []string{"id", "date", "find"}},
		{name: "find -exec found file", src: `find . -exec {} \;`, want: []string{"{}", "find"}, dynamic: true},
		{name: "cd then relative path", src: `cd /usr/bin && ./id`, want: []string{"cd", "./id"}, dynamic: true},
		{name: "relative path", src: `./id`, want: []string{"./id"}},
		{name: "nested dash grammar", src: `dash -c '((id))'`, want: []string{"id", "dash"}},
		{name: "nested zsh", src: `zsh -c 'id'`, want: []string{"zsh"}, dynamic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shell := tc.shell
			if shell == "" {
				shell = "bash"
			}
			sh, err := ParseShell(tc.src, shell)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range sh.Commands {
				got = append(got, c.Command)
			}
			if !slices.Equal(got, tc.want) || sh.Dynamic != tc.dynamic {
				t.Errorf("ParseShell(%q) = %q dynamic %v (%q), want %q dynamic %v", tc.src, got, sh.Dynamic, sh.Reasons, tc.want, tc.dynamic)
			}
		})
	}
}

func TestParseShellDetails(t *testing.T) {
	sh, err := ParseShell(`timeout 5 busybox rm -rf "/"`, "bash")
	if err != nil {
		t.Fatal(err)
	}
	c := sh.Commands[0]
	if c.Command != "rm" || !slices.Equal(c.Args, []string{"-rf", "/"}) || !slices.Equal(c.Via, []string{"timeout", "busybox"}) || c.exe != "busybox" {
		t.Errorf("got %+v", c)
	}
	sh, err = ParseShell(":(){ :|:& };:", "bash")
	if err != nil {
		t.Fatal(err)
	}
	if len(sh.Functions) != 1 || sh.Functions[0].Name != ":" || !slices.Equal(sh.Functions[0].Calls, []string{":", ":"}) {
		t.Errorf("fork bomb functions: %+v", sh.Functions)
	}
	sh, _ = ParseShell(`rm "$x"`, "bash")
	if !sh.Commands[0].Dynamic || sh.Dynamic || sh.Commands[0].Args[0] != `"$x"` {
		t.Errorf("non-literal argument: %+v dynamic %v", sh.Commands[0], sh.Dynamic)
	}
	var pe *ParseError
	if _, err := ParseShell("echo 'unterminated", "bash"); !errors.As(err, &pe) {
		t.Errorf("unterminated quote: err %v, want a ParseError", err)
	}
}

// TestParseShellGrammar: a string that does not parse in the running
// shell's grammar is denied, never read in another one.
func TestParseShellGrammar(t *testing.T) {
	for _, tc := range []struct{ shell, src string }{
		{"dash", "echo a &>/dev/stderr id"}, // dash: echo a & then >/dev/stderr id
		{"sh", "echo a &>/dev/stderr id"},
		{"dash", "function f { id; }; f"},
		{"dash", "diff <(id) x"},
		{"bash", `sh -c 'echo a &>/dev/null id'`}, // an inner shell's script too
		{"zsh", "id"}, // no grammar for it
	} {
		var pe *ParseError
		if sh, err := ParseShell(tc.src, tc.shell); !errors.As(err, &pe) {
			t.Errorf("ParseShell(%q, %s) = %+v, %v; want a ParseError", tc.src, tc.shell, sh, err)
		}
	}
}

// TestCompleteShellGrammar: the grammar is that of the file the shell
// resolves to, for the string and for the sh -c scripts in it.
func TestCompleteShellGrammar(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // name -> the file it resolves to
		shell string
		want  []string
		dyn   bool
	}{
		{"sh is dash", map[string]string{"/bin/sh": "/usr/bin/dash"}, "/bin/sh", []string{"id", "echo"}, false},
		{"sh is bash", map[string]string{"/bin/sh": "/usr/bin/bash"}, "/bin/sh", []string{"echo"}, true},
		{"bash", map[string]string{"/bin/bash": "/usr/bin/bash"}, "/bin/bash", []string{"echo"}, true},
		{"sh resolves to neither", map[string]string{"/bin/sh": "/opt/sh"}, "/bin/sh", []string{"id", "echo"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ResolverFunc(func(name, _, _ string) (string, string, error) {
				if p, ok := tc.files[name]; ok {
					return p, "0", nil
				}
				return "", "", ErrNotFound
			})
			in := Input{Command: tc.shell, Shell: &Shell{Source: "((id)); echo hi"}}
			if err := Complete(&in, r); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range in.Shell.Commands {
				got = append(got, c.Command)
			}
			if !slices.Equal(got, tc.want) || in.Shell.Dynamic != tc.dyn {
				t.Errorf("got %q dynamic %v (%q), want %q dynamic %v", got, in.Shell.Dynamic, in.Shell.Reasons, tc.want, tc.dyn)
			}
		})
	}
	// An inner sh -c is parsed as what sh resolves to.
	r := ResolverFunc(func(name, _, _ string) (string, string, error) {
		return map[string]string{"/bin/bash": "/usr/bin/bash", "sh": "/usr/bin/dash"}[name], "0", nil
	})
	in := Input{Command: "/bin/bash", Shell: &Shell{Source: `sh -c '((id))'`}}
	if err := Complete(&in, r); err != nil || len(in.Shell.Commands) != 2 || in.Shell.Commands[0].Command != "id" {
		t.Errorf("sh -c under bash: %+v, %v; want id listed", in.Shell, err)
	}
}
