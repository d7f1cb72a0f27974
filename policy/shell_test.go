package policy

import (
	"errors"
	"slices"
	"testing"
)

func TestParseShell(t *testing.T) {
	for _, tc := range []struct {
		name    string
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
		{name: "arithmetic", src: "echo $(( $(id -u) + 1 ))", want: []string{"echo", "id"}},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, err := ParseShell(tc.src)
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
	sh, err := ParseShell(`timeout 5 busybox rm -rf "/"`)
	if err != nil {
		t.Fatal(err)
	}
	c := sh.Commands[0]
	if c.Command != "rm" || !slices.Equal(c.Args, []string{"-rf", "/"}) || !slices.Equal(c.Via, []string{"timeout", "busybox"}) || c.exe != "busybox" {
		t.Errorf("got %+v", c)
	}
	sh, err = ParseShell(":(){ :|:& };:")
	if err != nil {
		t.Fatal(err)
	}
	if len(sh.Functions) != 1 || sh.Functions[0].Name != ":" || !slices.Equal(sh.Functions[0].Calls, []string{":", ":"}) {
		t.Errorf("fork bomb functions: %+v", sh.Functions)
	}
	sh, _ = ParseShell(`rm "$x"`)
	if !sh.Commands[0].Dynamic || sh.Dynamic || sh.Commands[0].Args[0] != `"$x"` {
		t.Errorf("non-literal argument: %+v dynamic %v", sh.Commands[0], sh.Dynamic)
	}
	var pe *ParseError
	if _, err := ParseShell("echo 'unterminated"); !errors.As(err, &pe) {
		t.Errorf("unterminated quote: err %v, want a ParseError", err)
	}
}
