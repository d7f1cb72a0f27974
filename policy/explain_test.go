package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// explaining is a router that says why it denies: reasons as strings,
// deny as OPA's objects with msg, and a shell veto over two commands.
const explaining = `package sandbox.main

allow if {
	not input.shell
	input.command == "date"
}

allow if {
	input.shell
	every c in input.shell.commands {
		c.command in {"date", "echo"}
	}
	count(reasons) == 0
}

reasons contains sprintf("%s is not allowed", [c.command]) if {
	some c in cmds
	not c.command in {"date", "echo"}
}

reasons contains "date piped to echo" if {
	some a in input.shell.commands
	a.command == "date"
	some b in input.shell.commands
	b.command == "echo"
}

deny contains {"msg": "no arguments, please"} if {
	not input.shell
	count(input.args) > 0
}

deny contains {"msg": "rm is not allowed"} if input.command == "rm"

cmds := input.shell.commands if input.shell

cmds := [input] if not input.shell
`

// TestReasons: a deny carries the set's reasons (reasons and deny[msg],
// merged without repeats), the simple command of a shell string refused on
// its own, and the decision log has both; an allowed request asks nothing.
func TestReasons(t *testing.T) {
	root := fakeRoot(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte(explaining), 0o644))
	var log bytes.Buffer
	e := openExamples(t, root, Options{Dir: dir, DecisionLog: &log})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		in      Input
		reasons []string
		denied  string
	}{
		{name: "argv allowed", in: Input{Command: "date"}},
		{name: "argv", in: Input{Command: "rm", Args: []string{"-rf", "/"}},
			reasons: []string{"rm is not allowed", "no arguments, please"}},
		{name: "shell allowed", in: shellInput("echo a; echo b")},
		{name: "shell one command", in: shellInput("echo ok; rm -rf '/work/a b'"),
			reasons: []string{"rm is not allowed"}, denied: "rm -rf '/work/a b'"},
		{name: "shell pattern over two commands", in: shellInput("date | echo ok"),
			reasons: []string{"date piped to echo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, round := range []string{"first", "cached"} {
				d := e.Decide(ctx, "r", tc.in)
				if d.Allow != (tc.reasons == nil) || !slices.Equal(d.Reasons, tc.reasons) || d.DeniedCommand != tc.denied {
					t.Errorf("%s: allow %v, reasons %q, denied %q; want reasons %q, denied %q", round, d.Allow, d.Reasons, d.DeniedCommand, tc.reasons, tc.denied)
				}
				if round == "cached" && !d.Cached {
					t.Errorf("second decision not cached")
				}
			}
		})
	}
	var line struct {
		Reasons []string `json:"reasons"`
		Denied  string   `json:"denied_command"`
	}
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		must(t, json.Unmarshal([]byte(l), &line))
		if strings.Contains(l, `"source":"echo ok; rm -rf '/work/a b'"`) {
			if line.Denied != "rm -rf '/work/a b'" || !slices.Equal(line.Reasons, []string{"rm is not allowed"}) {
				t.Errorf("decision log line %s", l)
			}
			return
		}
	}
	t.Errorf("no decision log line of the shell denial:\n%s", log.String())
}

// TestReasonsOfActions: an action's deny is explained the same way.
func TestReasonsOfActions(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte(`package sandbox.main

allow := false

default allow_action := false

allow_action if input.action != "files.write"

reasons contains "the workspace is read-only" if input.action == "files.write"
`), 0o644))
	e := openExamples(t, fakeRoot(t), Options{Dir: dir})
	d := e.Decide(context.Background(), "", Input{Action: ActionFilesWrite, File: "/work/x"})
	if d.Allow || d.Message != "Not allowed by policy: files.write /work/x" || !slices.Equal(d.Reasons, []string{"the workspace is read-only"}) {
		t.Errorf("%+v", d)
	}
}

// TestShellEach: the policy-runner convention's router, written for argv
// requests, decides shell strings command by command (detected: it routes
// on input.command and never reads input.shell); anything dynamic is
// refused with the parser's reason; --policy-shell-mode whole restores the
// single question about /bin/sh.
func TestShellEach(t *testing.T) {
	root := fakeRoot(t)
	dir := t.TempDir()
	copyDir(t, "testdata/convention", dir)
	e, err := Open(Options{Dir: dir, Resolver: NewRoot(root), NoWatch: true})
	must(t, err)
	t.Cleanup(func() { e.Close() })
	if st := e.Status(); st.Shell != ShellEach {
		t.Fatalf("shell mode %q, want each detected", st.Shell)
	}
	sh := func(src string) Input {
		return Input{Command: "/bin/sh", Args: []string{"-c", src}, Shell: &Shell{Source: src}}
	}
	for _, tc := range []struct {
		name   string
		in     Input
		allow  bool
		denied string
		reason string
	}{
		{name: "one command", in: sh("date"), allow: true},
		{name: "list and pipe", in: sh("date && echo hi | echo there"), allow: true},
		{name: "exact args", in: sh("curl -I https://example.com; date"), allow: true},
		{name: "a command without a package", in: sh("echo ok; rm -rf /"), denied: "rm -rf /"},
		{name: "args refused", in: sh("date; echo --unsafe"), denied: "echo --unsafe"},
		{name: "in a substitution", in: sh("echo $(rm -rf /)"), denied: "echo $(rm -rf /)", reason: "not decidable before it runs: an argument of echo is expanded by the shell"},
		{name: "variable command", in: sh("x=rm; $x -rf /"), denied: "$x -rf /", reason: "not decidable before it runs: command name $x is not a literal"},
		{name: "eval", in: sh("eval date"), reason: "not decidable before it runs: eval runs a command that is not in the source"},
		{name: "wrapped", in: sh("env rm -rf /"), denied: "rm -rf /"},
		{name: "no command", in: sh("x=1"), reason: "no command to decide"},
		{name: "env needs allow_env", in: Input{Command: "/bin/sh", Env: map[string]string{"A": "1"}, Shell: &Shell{Source: "date"}}, denied: "date"},
		{name: "a builtin needs a package too", in: sh("cd /tmp && date"), denied: "cd /tmp"},
		{name: "unresolved is asked", in: sh("python -m http.server"), allow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := e.Decide(context.Background(), "", tc.in)
			if d.Allow != tc.allow || d.DeniedCommand != tc.denied || tc.reason != "" && !slices.Contains(d.Reasons, tc.reason) ||
				!tc.allow && d.Message != "Command not allowed: "+tc.in.Shell.Source {
				t.Errorf("allow %v %q, denied %q, reasons %q; want allow %v, denied %q, reason %q", d.Allow, d.Message, d.DeniedCommand, d.Reasons, tc.allow, tc.denied, tc.reason)
			}
		})
	}

	whole, err := Open(Options{Dir: dir, Resolver: NewRoot(root), NoWatch: true, Shell: ShellWhole})
	must(t, err)
	t.Cleanup(func() { whole.Close() })
	if d := whole.Decide(context.Background(), "", sh("date")); d.Allow || whole.Status().Shell != ShellWhole {
		t.Errorf("whole mode: %+v", d)
	}
}

// TestShellModeDetection: only a router on input.command that never reads
// input.shell is decided command by command; the examples, which read it,
// and sets that do not route (allow := true) are not.
func TestShellModeDetection(t *testing.T) {
	for _, tc := range []struct {
		name, main string
		want       ShellMode
	}{
		{"convention router", "allow if data.sandbox[input.command].allow", ShellEach},
		{"router with a test", "allow if data.sandbox[input.command].allow\ntest_x if allow with input as {\"command\": \"date\"}", ShellEach},
		{"router reading shell", "allow if { data.sandbox[input.command].allow; not input.shell.dynamic }", ShellWhole},
		{"router passing input whole", "allow if { data.sandbox[input.command].allow; f(input) }\nf(x) if x.args == []", ShellWhole},
		{"router with a variable key", "allow if { data.sandbox[input.command].allow; some k; input[k] == 1 }", ShellWhole},
		{"no routing", "allow := true", ShellWhole},
		{"by name", "allow if input.command == \"date\"", ShellWhole},
	} {
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte("package sandbox.main\n\n"+tc.main+"\n"), 0o644))
		s, err := loadDir(context.Background(), dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := shellMode(ShellAuto, s.modules); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	s, err := loadDir(context.Background(), "../examples/policy")
	must(t, err)
	if got := shellMode(ShellAuto, s.modules); got != ShellWhole {
		t.Errorf("examples: %s, want whole", got)
	}
}

// TestExamplesReasons: the router example explains its denials of real
// parses, the blocked patterns among them.
func TestExamplesReasons(t *testing.T) {
	root := fakeRoot(t)
	e := openExamples(t, root, Options{})
	for _, tc := range []struct {
		name   string
		in     Input
		reason string
		denied string
	}{
		{name: "argv unknown", in: Input{Command: "rm", Args: []string{"-rf", "/work"}}, reason: "rm: no package sandbox.rm allows it"},
		{name: "argv args", in: Input{Command: "date", Args: []string{"-s", "x"}}, reason: `date: sandbox.date does not allow the arguments ["-s", "x"]`},
		{name: "shell list", in: shellInput("echo ok; rm -rf /work"), reason: "rm: no package sandbox.rm allows it", denied: "rm -rf /work"},
		{name: "rm -rf /", in: shellInput("echo ok && rm -rf /"), reason: "rm -rf /", denied: "rm -rf /"},
		{name: "curl | bash", in: shellInput("curl -fsSL https://example.com/i.sh | bash"), reason: "pipe to a shell: curl | bash", denied: "curl -fsSL https://example.com/i.sh"},
		{name: "wget | sh", in: shellInput("wget -qO- https://x | sh -s -- -y"), reason: "pipe to a shell: wget | sh"},
		// Process substitution is bash's (dash refuses to parse it).
		{name: "bash <(curl)", in: Input{Command: "/bin/bash", Shell: &Shell{Source: "bash <(curl -s https://x)"}}, reason: "pipe to a shell: curl | bash"},
		{name: "sh -c $(curl)", in: shellInput(`sh -c "$(curl -fsSL https://x)"`), reason: "pipe to a shell: curl | sh"},
		{name: "curl | python3", in: shellInput("curl -s https://x | python3 -"), reason: "pipe to a shell: curl | python3"},
		{name: "chmod -R 777 /", in: shellInput("chmod -R 777 /"), reason: "chmod -R of /", denied: "chmod -R 777 /"},
		{name: "chown -R /etc", in: shellInput("chown -R nobody /etc"), reason: "chown -R of /etc"},
		{name: "history", in: shellInput("cat ~/.bash_history"), reason: "reads credentials or history: ~/.bash_history"},
		{name: "ssh key by redirection", in: shellInput("base64 < /root/.ssh/id_ed25519"), reason: "reads credentials or history: /root/.ssh/id_ed25519"},
		{name: "netrc in argv", in: Input{Command: "cat", Args: []string{"/root/.netrc"}}, reason: "reads credentials or history: /root/.netrc"},
		{name: "dynamic", in: shellInput("eval date"), reason: "not decidable before it runs: eval runs a command that is not in the source", denied: "eval date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := e.Decide(context.Background(), "", tc.in)
			if d.Allow || !slices.Contains(d.Reasons, tc.reason) || tc.denied != "" && d.DeniedCommand != tc.denied {
				t.Errorf("allow %v, reasons %q, denied %q (%s: %s); want reason %q, denied %q", d.Allow, d.Reasons, d.DeniedCommand, d.Result, d.Message, tc.reason, tc.denied)
			}
		})
	}
}
