package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRoot builds a sandbox root: programs in /usr/bin (bin is a link to
// it, as on merged-/usr hosts) and a /usr/local/bin/date that is a
// symlink to rm.
func fakeRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/local/bin", "work"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"date", "echo", "rm", "busybox", "env", "dash", "bash", "cat", "id", "git", "curl", "uname"} {
		if err := os.WriteFile(filepath.Join(dir, "usr/bin", p), []byte("#!/bin/true "+p+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "usr/bin/noexec"), []byte("x"), 0o644))
	must(t, os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	must(t, os.Symlink("dash", filepath.Join(dir, "usr/bin/sh")))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openExamples(t *testing.T, root string, opts Options) *Engine {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = "../examples/policy"
	}
	opts.Resolver = NewRoot(root)
	opts.NoWatch = true
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if st := e.Status(); st.DenyAll {
		t.Fatalf("examples do not load: %s", st.Error)
	}
	return e
}

// TestExamplesRouter: the router example decides argv and shell requests,
// the shell bypass attempts among them.
func TestExamplesRouter(t *testing.T) {
	root := fakeRoot(t)
	e := openExamples(t, root, Options{})
	symlinked := root + "/usr/local/bin/date"
	for _, tc := range []struct {
		name  string
		in    Input
		allow bool
		msg   string
		setup func(t *testing.T)
	}{
		{name: "argv allowed", in: Input{Command: "date"}, allow: true},
		{name: "argv args refused", in: Input{Command: "date", Args: []string{"-s", "x"}}, msg: "Command not allowed: date"},
		{name: "argv unknown", in: Input{Command: "rm", Args: []string{"-rf", "/"}}, msg: "Command not allowed: rm"},
		{name: "argv env refused", in: Input{Command: "date", Env: map[string]string{"A": "1"}}, msg: "Command not allowed: date"},
		{name: "argv not found", in: Input{Command: "nosuch"}, msg: "Failed to resolve executable path for 'nosuch': executable file not found in PATH"},
		{name: "argv not executable", in: Input{Command: "/usr/bin/noexec"}, msg: "Failed to resolve executable path for '/usr/bin/noexec': /usr/bin/noexec is not executable"},
		{name: "argv dotdot path", in: Input{Command: "/usr/bin/../bin/rm", Args: []string{"-rf", "/"}}, msg: "Command not allowed: /usr/bin/../bin/rm"},
		{name: "argv git status", in: Input{Command: "git", Args: []string{"status"}}, allow: true},
		{name: "argv git push", in: Input{Command: "git", Args: []string{"push"}}, msg: "Command not allowed: git"},
		{name: "shell allowed", in: shellInput("date && echo ok | date"), allow: true},
		{name: "shell builtin", in: shellInput("cd /tmp; date"), allow: true},
		{name: "shell list", in: shellInput("echo ok; rm -rf /"), msg: "Command not allowed: echo ok; rm -rf /"},
		{name: "shell substitution", in: shellInput("echo $(rm -rf /)")},
		{name: "shell backticks", in: shellInput("echo `id`")},
		{name: "shell pipe", in: shellInput("echo ok | rm x")},
		{name: "shell eval", in: shellInput("eval date")},
		{name: "shell variable", in: shellInput("x=rm; $x -rf /")},
		{name: "shell here-doc", in: shellInput("echo <<EOF\n$(rm -rf /)\nEOF\n")},
		{name: "shell env", in: shellInput("env rm -rf /")},
		{name: "shell busybox", in: shellInput("busybox rm -rf /")},
		{name: "shell busybox date", in: shellInput("busybox date")},
		{name: "shell dotdot", in: shellInput("/usr/bin/../bin/rm -rf /")},
		{name: "shell sh -c", in: shellInput("sh -c 'rm -rf /'")},
		{name: "shell fork bomb", in: shellInput(":(){ :|:& };:")},
		{name: "shell parse error", in: shellInput("echo 'x"), msg: "Failed to parse shell command: 1:6: reached EOF without closing quote `'`"},
		{name: "symlinked name argv", in: Input{Command: "date"}, msg: "Command not allowed: date", setup: func(t *testing.T) {
			must(t, os.Symlink("../../bin/rm", symlinked))
			t.Cleanup(func() { os.Remove(symlinked) })
		}},
		{name: "symlinked name shell", in: shellInput("date"), setup: func(t *testing.T) {
			must(t, os.Symlink("/usr/bin/rm", symlinked))
			t.Cleanup(func() { os.Remove(symlinked) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			d := e.Decide(context.Background(), "r1", tc.in)
			if d.Allow != tc.allow || tc.msg != "" && d.Message != tc.msg {
				b, _ := json.Marshal(d.Input)
				t.Errorf("allow %v %s %q, want %v %q\ninput %s", d.Allow, d.Result, d.Message, tc.allow, tc.msg, b)
			}
		})
	}
}

func shellInput(src string) Input { return Input{Shell: &Shell{Source: src}} }

func TestResolve(t *testing.T) {
	root := fakeRoot(t)
	r := NewRoot(root)
	must(t, os.Symlink("/../../../../usr/bin/rm", filepath.Join(root, "usr/local/bin/up")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(root, "usr/local/bin/out")))
	for _, tc := range []struct{ name, cmd, path, want, err string }{
		{name: "PATH", cmd: "date", want: "/usr/bin/date"},
		{name: "through /bin link", cmd: "/bin/date", want: "/usr/bin/date"},
		{name: "dotdot", cmd: "/usr/bin/../bin/rm", want: "/usr/bin/rm"},
		{name: "link to shell", cmd: "sh", want: "/usr/bin/dash"},
		{name: "link stays in root", cmd: "up", want: "/usr/bin/rm"},
		{name: "link out of root", cmd: "/usr/local/bin/out", err: "/etc: no such file or directory"},
		{name: "caller PATH", cmd: "date", path: "/usr/local/bin", err: "not found"},
		{name: "relative to cwd", cmd: "../usr/bin/id", want: "/usr/bin/id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h, err := r.Resolve(tc.cmd, tc.path, "/work")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve(%s) = %s, %v; want error %q", tc.cmd, p, err, tc.err)
				}
				return
			}
			if err != nil || p != tc.want || len(h) != 64 {
				t.Fatalf("Resolve(%s) = %s %s %v, want %s", tc.cmd, p, h, err, tc.want)
			}
		})
	}
	// The hash is the file's, and a rewrite of it is seen.
	_, h1, _ := r.Resolve("date", "", "")
	must(t, os.WriteFile(filepath.Join(root, "usr/bin/date"), []byte("#!/bin/true other date\n"), 0o755))
	_, h2, _ := r.Resolve("date", "", "")
	if sum := sha256.Sum256([]byte("#!/bin/true other date\n")); h1 == h2 || h2 != hex.EncodeToString(sum[:]) {
		t.Errorf("hash after rewrite: %s (before %s)", h2, h1)
	}
	// On the host, with /usr bound in: the real programs.
	hr := NewRoot(t.TempDir(), "/usr")
	if p, _, err := hr.Resolve("sh", "/usr/bin", ""); err != nil || !strings.HasPrefix(p, "/usr/bin/") {
		t.Errorf("host sh: %s %v", p, err)
	}
}

// TestConvention loads the policy-runner convention's own files unchanged:
// its router, which OPA rejects as written, and its modules.
func TestConvention(t *testing.T) {
	root := fakeRoot(t)
	dir := t.TempDir()
	copyDir(t, "testdata/convention", dir)
	e, err := Open(Options{Dir: dir, Resolver: NewRoot(root), NoWatch: true})
	must(t, err)
	t.Cleanup(func() { e.Close() })
	if st := e.Status(); st.DenyAll {
		t.Fatalf("convention does not load: %s", st.Error)
	}
	for _, tc := range []struct {
		in    Input
		allow bool
	}{
		{Input{Command: "date"}, true},
		{Input{Command: "date", Args: []string{"x"}}, false},
		{Input{Command: "curl", Args: []string{"-I", "https://example.com"}}, true},
		{Input{Command: "curl", Args: []string{"-I", "https://example.org"}}, false},
		{Input{Command: "echo", Args: []string{"--unsafe"}}, false},
		{Input{Command: "echo", Args: []string{"hi"}}, true},
		{Input{Command: "echo", Env: map[string]string{"A": "b"}}, false},
		{Input{Command: "rm"}, false},
		{Input{Command: "main"}, false}, // the router never routes to itself
	} {
		if d := e.Decide(context.Background(), "", tc.in); d.Allow != tc.allow {
			t.Errorf("%s %q: allow %v (%s), want %v", tc.in.Command, tc.in.Args, d.Allow, d.Message, tc.allow)
		}
	}

	// Its toolx_segments is recursive: rejected, with a message that
	// says so and names the author's package.
	copyDir(t, "testdata/convention-extra", dir)
	must(t, os.Remove(filepath.Join(dir, "curl_pinned.rego"))) // a second default allow for sandbox.curl
	_, err = loadDir(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "recursive rules are not supported") || !strings.Contains(err.Error(), "data.sandbox.toolx_segments.valid_from") {
		t.Errorf("recursive toolx_segments: %v", err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	must(t, err)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(to, e.Name()), data, 0o644))
	}
}

const (
	allowDate = "package sandbox.main\n\nallow if input.command == \"date\"\n"
	allowEcho = "package sandbox.main\n\nallow if input.command == \"echo\"\n"
)

// TestReload: valid -> invalid -> valid, each seen within 2 s, in a
// subdirectory made after the start; Close leaves no goroutine behind.
func TestReload(t *testing.T) {
	before := runtime.NumGoroutine()
	root := fakeRoot(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte(allowDate), 0o644))
	var logs bytes.Buffer
	var mu sync.Mutex
	obs := &countObserver{}
	e, err := Open(Options{Dir: dir, Resolver: NewRoot(root), Logger: newLogger(&logs, &mu), Observer: obs, Debounce: 50 * time.Millisecond})
	must(t, err)
	rev0 := e.Status().Revision
	decide := func(cmd string) Decision { return e.Decide(context.Background(), "", Input{Command: cmd}) }
	if !decide("date").Allow || decide("echo").Allow {
		t.Fatal("initial set not in force")
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 2 s; status %+v", what, e.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A valid edit, in a new subdirectory.
	must(t, os.Remove(filepath.Join(dir, "main.rego")))
	must(t, os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "deeper", "main.rego"), []byte(allowEcho), 0o644))
	waitFor("valid edit", func() bool { return decide("echo").Allow })
	if decide("date").Allow || e.Status().Revision == rev0 {
		t.Errorf("old set still in force: %+v", e.Status())
	}
	// An invalid edit: deny-all, with the error.
	must(t, os.WriteFile(filepath.Join(dir, "sub", "deeper", "bad.rego"), []byte("package sandbox.x\n\nallow if {"), 0o644))
	waitFor("invalid edit", func() bool { return e.Status().DenyAll })
	d := decide("echo")
	if d.Allow || d.Result != DenyAll || !strings.HasPrefix(d.Message, "Policy deny-all is active: parse sub/deeper/bad.rego:") {
		t.Errorf("deny-all decision: %+v", d)
	}
	// Fixed: recovers.
	must(t, os.WriteFile(filepath.Join(dir, "sub", "deeper", "bad.rego"), []byte("package sandbox.x\n\nallow := true\n"), 0o644))
	waitFor("fixed edit", func() bool { return decide("echo").Allow })
	mu.Lock()
	if n := strings.Count(logs.String(), "policy loaded"); n < 3 || !strings.Contains(logs.String(), "revision=") {
		t.Errorf("want a log line with the revision per valid swap, got:\n%s", logs.String())
	}
	mu.Unlock()
	if obs.loads() < 3 {
		t.Errorf("observer saw %d loads", obs.loads())
	}
	must(t, e.Close())
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestFailClosed: a directory that does not load denies everything.
func TestFailClosed(t *testing.T) {
	root := fakeRoot(t)
	for _, tc := range []struct{ name, file, text, err string }{
		{name: "no router", file: "x.rego", text: "package sandbox.date\n\nallow := true\n", err: "declares package sandbox.main"},
		{name: "syntax", file: "main.rego", text: "package sandbox.main\nallow if {", err: "parse main.rego"},
		{name: "v0 syntax", file: "main.rego", text: "package sandbox.main\nallow { true }", err: "parse main.rego"},
		{name: "recursion", file: "main.rego", text: "package sandbox.main\nallow if f(0)\nf(i) if f(i+1)\n", err: "recursive rules are not supported"},
		{name: "empty", err: "no .rego files"},
		{name: "missing dir", err: "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.name == "missing dir" {
				dir = filepath.Join(dir, "missing")
			}
			if tc.file != "" {
				must(t, os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.text), 0o644))
			}
			e, err := Open(Options{Dir: dir, Resolver: NewRoot(root)})
			must(t, err)
			t.Cleanup(func() { e.Close() })
			st := e.Status()
			d := e.Decide(context.Background(), "", Input{Command: "date"})
			if !st.DenyAll || !strings.Contains(st.Error, tc.err) || d.Allow || d.Message != "Policy deny-all is active: "+st.Error {
				t.Errorf("status %+v, decision %+v", st, d)
			}
		})
	}
	// An evaluation error is a deny with the convention's words.
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte("package sandbox.main\n\nallow := true if input.command == \"date\"\n\nallow := false if count(input.args) > 0\n"), 0o644))
	e, err := Open(Options{Dir: dir, Resolver: NewRoot(root), NoWatch: true})
	must(t, err)
	t.Cleanup(func() { e.Close() })
	d := e.Decide(context.Background(), "", Input{Command: "date", Args: []string{"x"}})
	if d.Allow || d.Result != EvalError || !strings.HasPrefix(d.Message, "Policy evaluation failed for 'date': ") {
		t.Errorf("eval error: %+v", d)
	}
	// Anything but true is a deny.
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte("package sandbox.main\n\nallow := \"yes\"\n"), 0o644))
	e2, err := Open(Options{Dir: dir, Resolver: NewRoot(root), NoWatch: true})
	must(t, err)
	t.Cleanup(func() { e2.Close() })
	if d := e2.Decide(context.Background(), "", Input{Command: "date"}); d.Allow || d.Message != "Command not allowed: date" {
		t.Errorf("a string allow: %+v", d)
	}
}

// TestDecisionLogAndShadow: a line per decision, env redacted unless
// asked; shadow mode allows and records the would-be deny.
func TestDecisionLogAndShadow(t *testing.T) {
	root := fakeRoot(t)
	for _, tc := range []struct {
		name   string
		mode   Mode
		logEnv bool
	}{
		{name: "enforce", mode: Enforce},
		{name: "shadow with env", mode: Shadow, logEnv: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			obs := &countObserver{}
			e := openExamples(t, root, Options{Mode: tc.mode, DecisionLog: &buf, LogEnv: tc.logEnv, Observer: obs})
			in := Input{Command: "rm", Args: []string{"-rf", "/"}, Env: map[string]string{"TOKEN": "s3cret"}, Caller: "alice", FrontEnd: "run"}
			d := e.Decide(context.Background(), "req-1", in)
			e.Decide(context.Background(), "req-2", Input{Command: "date", Caller: "bob"})
			if d.Allow != (tc.mode == Shadow) || d.Result != Denied || d.Shadow != (tc.mode == Shadow) || d.Message != "Command not allowed: rm" {
				t.Errorf("decision %+v", d)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("want 2 log lines, got %q", buf.String())
			}
			var l struct {
				Time      time.Time `json:"time"`
				RequestID string    `json:"request_id"`
				Caller    string    `json:"caller"`
				Input     Input     `json:"input"`
				Result    Result    `json:"result"`
				Allow     bool      `json:"allow"`
				Shadow    bool      `json:"shadow"`
				Revision  string    `json:"revision"`
				EvalUS    *float64  `json:"eval_us"`
			}
			must(t, json.Unmarshal([]byte(lines[0]), &l))
			wantEnv := Redacted
			if tc.logEnv {
				wantEnv = "s3cret"
			}
			if l.Time.IsZero() || l.RequestID != "req-1" || l.Caller != "alice" || l.Input.Path != "/usr/bin/rm" || l.Input.Env["TOKEN"] != wantEnv ||
				l.Result != Denied || l.Allow != (tc.mode == Shadow) || l.Revision != e.Status().Revision || l.EvalUS == nil || *l.EvalUS <= 0 {
				t.Errorf("log line %s", lines[0])
			}
			if strings.Contains(buf.String(), "s3cret") != tc.logEnv {
				t.Errorf("env value logged: %v, want %v", !tc.logEnv, tc.logEnv)
			}
			if obs.count(Denied) != 1 || obs.count(Allowed) != 1 {
				t.Errorf("observer: %+v", obs.results)
			}
		})
	}
}

type countObserver struct {
	mu      sync.Mutex
	results map[Result]int
	loaded  int
}

func (o *countObserver) Decided(r Result, shadow bool, eval time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.results == nil {
		o.results = map[Result]int{}
	}
	o.results[r]++
}

func (o *countObserver) Loaded(string, bool, error) { o.mu.Lock(); o.loaded++; o.mu.Unlock() }
func (o *countObserver) count(r Result) int         { o.mu.Lock(); defer o.mu.Unlock(); return o.results[r] }
func (o *countObserver) loads() int                 { o.mu.Lock(); defer o.mu.Unlock(); return o.loaded }

// decideCases are BenchmarkDecide's: an argv request, and a shell string
// of four commands (one a builtin), both allowed by the router example.
// in(i) is the i-th request: the same every time when repeat, else one
// that differs in an argument, so that the decision cache never has it.
var decideCases = []struct {
	name   string
	repeat bool
	in     func(i int) Input
}{
	{"argv-new", false, func(i int) Input {
		return Input{Command: "git", Args: []string{"commit", "-m", "x" + strconv.Itoa(i)}}
	}},
	{"shell-new", false, func(i int) Input {
		return Input{Shell: &Shell{Source: "cd /tmp && date | echo ok" + strconv.Itoa(i)}}
	}},
	{"argv-repeat", true, func(int) Input { return Input{Command: "git", Args: []string{"commit", "-m", "x"}} }},
	{"shell-repeat", true, func(int) Input { return Input{Shell: &Shell{Source: "cd /tmp && date | echo ok"}} }},
}

// BenchmarkDecide measures a whole decision of the router example (12
// modules), resolution on the host included, and reports p50 and p99:
// of requests seen for the first time (-new) and of repeated ones, which
// the decision cache answers (-repeat).
func BenchmarkDecide(b *testing.B) {
	for _, bc := range decideCases {
		b.Run(bc.name, func(b *testing.B) {
			e, err := Open(Options{Dir: "../examples/policy", Resolver: NewRoot("/"), NoWatch: true})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			if d := e.Decide(ctx, "", bc.in(-1)); !d.Allow {
				b.Fatalf("%s denied: %s", bc.name, d.Message)
			}
			i := 0
			latencies(b, func() {
				e.Decide(ctx, "", bc.in(i))
				i++
			})
		})
	}
}

func newLogger(w *bytes.Buffer, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{w, mu}, nil))
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestExamplesRegoTests runs the Rego unit tests of examples/policy, as
// `opa test` would: every example module's cases hold.
func TestExamplesRegoTests(t *testing.T) {
	results, err := Test(context.Background(), "../examples/policy")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 20 {
		t.Fatalf("%d Rego tests in examples/policy, want the examples' own", len(results))
	}
	var out strings.Builder
	if !PrintTests(&out, results) {
		t.Errorf("Rego tests failed:\n%s", out.String())
	}
}

// TestDecideCancelled: a request whose context has ended is not evaluated
// to the end: its decision is an evaluation error, a deny, whether the
// context ended before or during the evaluation.
func TestDecideCancelled(t *testing.T) {
	e, err := Open(Options{Dir: "../examples/policy", Resolver: NewRoot("/"), NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	in := Input{Shell: &Shell{Source: "cd /tmp && date | echo ok"}}
	if d := e.Decide(context.Background(), "", in); d.Result != Allowed {
		t.Fatalf("live context: %s (%s), want allow", d.Result, d.Message)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in.Shell.Source += " again" // not cached
	d := e.Decide(ctx, "", in)
	if d.Result != EvalError || d.Allow || !strings.Contains(d.Message, "context canceled") {
		t.Fatalf("cancelled context: %s allow=%v (%s), want eval_error", d.Result, d.Allow, d.Message)
	}
}

// TestDecideConcurrently: decisions made at once, in both grammars, are
// the ones made one by one (the parsers are pooled, and input values share
// terms).
func TestDecideConcurrently(t *testing.T) {
	root := fakeRoot(t)
	inputs := func() []Input {
		var ins []Input
		for i := range 24 {
			n := strconv.Itoa(i)
			switch i % 4 {
			case 0:
				ins = append(ins, Input{Shell: &Shell{Source: "cd /tmp && date | echo ok" + n}})
			case 1:
				ins = append(ins, Input{Command: "bash", Shell: &Shell{Source: "echo $((1+" + n + ")) && date"}})
			case 2:
				ins = append(ins, Input{Shell: &Shell{Source: "rm -rf / " + n}})
			case 3:
				ins = append(ins, Input{Command: "git", Args: []string{"log", "-n", n}, Env: map[string]string{"K": n}})
			}
		}
		return ins
	}
	ctx := context.Background()
	seq := openExamples(t, root, Options{})
	var want []Decision
	for _, in := range inputs() {
		want = append(want, seq.Decide(ctx, "", in))
	}
	par := openExamples(t, root, Options{})
	ins := inputs()
	got := make([]Decision, len(ins))
	var wg sync.WaitGroup
	for i := range ins {
		wg.Go(func() { got[i] = par.Decide(ctx, "", ins[i]) })
	}
	wg.Wait()
	for i := range ins {
		g, w := got[i], want[i]
		if g.Result != w.Result || g.Message != w.Message || !slices.Equal(g.Reasons, w.Reasons) || g.DeniedCommand != w.DeniedCommand {
			t.Errorf("input %d: concurrently %s %q %q %q, alone %s %q %q %q", i, g.Result, g.Message, g.Reasons, g.DeniedCommand, w.Result, w.Message, w.Reasons, w.DeniedCommand)
		}
		if g.Input.value().Compare(w.Input.value()) != 0 {
			t.Errorf("input %d: concurrently %v, alone %v", i, g.Input.value(), w.Input.value())
		}
	}
	if got[0].Result != Allowed || got[2].Result != Denied {
		t.Errorf("the router's answers: %s for %q, %s for %q", got[0].Result, ins[0].Shell.Source, got[2].Result, ins[2].Shell.Source)
	}
}
