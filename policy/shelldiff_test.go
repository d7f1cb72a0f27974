package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The differential test runs each string through the parser and through
// the real dash and bash, in a mount and pid namespace of their own where
// every name in /usr/bin (and /usr/sbin, /usr/local/...) is a script that
// logs its own name: the wrappers (env, nohup, find, sh...) then run the
// real program, everything else stops there. A command the shell ran that
// the parser neither listed nor marked dynamic is a miss. The same strings
// go through real jaild sandboxes in scripts/security-test.sh.

// diffHelperEnv makes the test binary the namespace's pid 1 (TestMain).
const diffHelperEnv = "JAILD_TEST_SHELLDIFF"

func TestMain(m *testing.M) {
	if dir := os.Getenv(diffHelperEnv); dir != "" {
		os.Exit(diffHelper(dir))
	}
	os.Exit(m.Run())
}

type diffCase struct {
	Shell string // dash or bash
	Src   string
	// Runs, if set, is a command the real shell must run: the case is
	// only a test if something runs.
	Runs string `json:"-"`
}

type diffRun struct {
	Ran []string
	Out string
}

// diffWrappers run the real program after logging: they run commands.
var diffWrappers = []string{"bash", "dash", "env", "nohup", "timeout", "nice", "stdbuf", "setsid", "xargs", "find", "time", "busybox"}

var diffCorpus = []diffCase{
	// The harness sees what runs.
	{Shell: "dash", Src: "id", Runs: "id"},
	{Shell: "bash", Src: "id", Runs: "id"},
	// Where the parser and the shells disagreed.
	{Shell: "dash", Src: "((id)); echo hi", Runs: "id"},
	{Shell: "dash", Src: "echo a &>/dev/stderr id", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id>&2)]'; echo $((x))", Runs: "id"},
	{Shell: "dash", Src: "x='a[$(id>&2)]'; echo $((x))"},
	{Shell: "dash", Src: "sh -c '((id))'", Runs: "id"},
	{Shell: "bash", Src: `dash -c "((id)); echo"`, Runs: "id"},
	// Arithmetic, subscripts and names bash evaluates.
	{Shell: "bash", Src: "x='a[$(id)]'; [[ $x -eq 0 ]]", Runs: "id"},
	{Shell: "bash", Src: `x='a[$(id)]'; [ "$x" -eq 0 ]; test "$x" -eq 0`},
	{Shell: "bash", Src: "x='a[$(id)]'; (( x ))", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; let y=x", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; for ((i = x; i < 0; )); do :; done", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; a=(1); echo ${a[x]}", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; s=abc; echo ${s:x}", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; echo ${!x}", Runs: "id"},
	{Shell: "bash", Src: "x='$(id)'; echo ${x@P}", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; declare -i n; n=x", Runs: "id"},
	{Shell: "bash", Src: "declare -n r='a[$(id)]'; echo $r", Runs: "id"},
	{Shell: "bash", Src: "x='a[$(id)]'; [[ -v a[x] ]]", Runs: "id"},
	{Shell: "bash", Src: "test -v 'a[$(id)]'", Runs: "id"},
	{Shell: "bash", Src: "a=(1); unset 'a[$(id)]'", Runs: "id"},
	{Shell: "bash", Src: "printf -v 'a[$(id)]' x", Runs: "id"},
	{Shell: "bash", Src: "read 'a[$(id)]' <<< x", Runs: "id"},
	{Shell: "bash", Src: "getopts a 'a[$(id)]' -a"},
	{Shell: "bash", Src: "mapfile -C id -c 1 a <<< x", Runs: "id"},
	{Shell: "bash", Src: "declare 'a[$(id)]=1'", Runs: "id"},
	{Shell: "bash", Src: "a=([$(id)]=1)", Runs: "id"},
	// Builtins that run what is not in the source.
	{Shell: "dash", Src: "eval id", Runs: "id"},
	{Shell: "bash", Src: "builtin eval id", Runs: "id"},
	{Shell: "dash", Src: "trap id EXIT", Runs: "id"},
	{Shell: "dash", Src: "alias x=id\nx", Runs: "id"},
	{Shell: "bash", Src: "shopt -s expand_aliases\nalias x=id\nx", Runs: "id"},
	{Shell: "dash", Src: "echo id > s; . ./s", Runs: "id"},
	{Shell: "bash", Src: "source /dev/stdin <<< id", Runs: "id"},
	{Shell: "bash", Src: "hash -p /usr/bin/id date; date", Runs: "id"},
	{Shell: "bash", Src: "BASH_CMDS[date]=/usr/bin/id; date", Runs: "id"},
	{Shell: "bash", Src: "PS4='$(id)'; set -x; true", Runs: "id"},
	{Shell: "dash", Src: "PATH=/nowhere:$PATH; id", Runs: "id"},
	{Shell: "bash", Src: "enable -n echo; echo x", Runs: "echo"},
	{Shell: "bash", Src: "command_not_found_handle() { id; }; nosuchcommand", Runs: "id"},
	// (The logging bash is started by dash, which drops BASH_FUNC_f%%
	// from the environment: these test less than they could.)
	{Shell: "bash", Src: "f() { id; }; export -f f; bash -c f"},
	{Shell: "bash", Src: "env 'BASH_FUNC_date%%=() { id; }' bash -c date"},
	{Shell: "dash", Src: "set -- id; \"$@\"", Runs: "id"},
	{Shell: "dash", Src: "x=$(echo id); $x", Runs: "id"},
	{Shell: "dash", Src: "echo id | sh", Runs: "id"},
	{Shell: "bash", Src: "echo id | xargs", Runs: "echo"},
	// Where commands hide in the grammar.
	{Shell: "dash", Src: "cat <<EOF\n$(id)\nEOF\n", Runs: "id"},
	{Shell: "bash", Src: "cat <<EOF\n`id`\nEOF\n", Runs: "id"},
	{Shell: "dash", Src: "cat <<'EOF'\n$(id)\nEOF\n", Runs: "cat"},
	{Shell: "bash", Src: "cat <(id) >(date)", Runs: "id"},
	{Shell: "bash", Src: "coproc id; wait", Runs: "id"},
	{Shell: "bash", Src: "function f { id; }; f", Runs: "id"},
	{Shell: "dash", Src: "f() { id; }; f", Runs: "id"},
	{Shell: "dash", Src: "{ id; }", Runs: "id"},
	{Shell: "dash", Src: "(id) & wait", Runs: "id"},
	{Shell: "dash", Src: "id & (sleep 0.1; date) &", Runs: "date"},
	{Shell: "dash", Src: "echo x >./o$(id)", Runs: "id"},
	{Shell: "dash", Src: "echo ${x:-$(id)}", Runs: "id"},
	{Shell: "dash", Src: "case $(id) in *) ;; esac", Runs: "id"},
	{Shell: "dash", Src: "case x in $(id)) ;; esac", Runs: "id"},
	{Shell: "bash", Src: "for ((i = 0; i < 1; i++)); do id; done", Runs: "id"},
	{Shell: "bash", Src: "[[ $(id) ]]", Runs: "id"},
	{Shell: "dash", Src: "while id; do break; done; until date; do :; done", Runs: "date"},
	{Shell: "dash", Src: "i\\\nd", Runs: "id"},
	{Shell: "dash", Src: "'i'd; \"i\"d; i''d", Runs: "id"},
	{Shell: "dash", Src: "echo a#b; id", Runs: "id"},
	{Shell: "dash", Src: "echo `id`", Runs: "id"},
	{Shell: "bash", Src: "a=$(id) b=2; x=$(date) true", Runs: "date"},
	// Wrappers.
	{Shell: "dash", Src: "time id", Runs: "id"},
	{Shell: "bash", Src: "time id", Runs: "id"},
	{Shell: "dash", Src: "time -p id", Runs: "id"},
	{Shell: "dash", Src: "! id", Runs: "id"},
	{Shell: "dash", Src: "exec id", Runs: "id"},
	{Shell: "bash", Src: "exec -a x id", Runs: "id"},
	{Shell: "dash", Src: "command id", Runs: "id"},
	{Shell: "dash", Src: "command -p id", Runs: "id"},
	{Shell: "bash", Src: "command -p id", Runs: "id"},
	{Shell: "dash", Src: "env id; env -i A=1 date", Runs: "date"},
	{Shell: "dash", Src: "env -S id", Runs: "id"},
	{Shell: "dash", Src: "nohup id", Runs: "id"},
	{Shell: "dash", Src: "nice -n 1 id; timeout 5 date", Runs: "date"},
	{Shell: "dash", Src: "setsid -w id; stdbuf -o0 date", Runs: "date"},
	{Shell: "dash", Src: "echo x | xargs id", Runs: "id"},
	{Shell: "dash", Src: "find . -maxdepth 0 -exec id {} \\;", Runs: "id"},
	{Shell: "dash", Src: "find . -maxdepth 0 -execdir date {} +", Runs: "date"},
	{Shell: "dash", Src: "busybox sh -c id", Runs: "busybox"}, // its own id applet
	{Shell: "dash", Src: "nohup sh -c 'bash -c \"id\"'", Runs: "id"},
	{Shell: "dash", Src: "cd /usr/bin && ./id", Runs: "id"},
}

func TestShellDifferential(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the shells run in a mount and pid namespace of their own")
	}
	for _, sh := range []string{"/usr/bin/dash", "/usr/bin/bash"} {
		if _, err := os.Stat(sh); err != nil {
			t.Skipf("no %s: %v", sh, err)
		}
	}
	dir := diffBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), diffHelperEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	in, err := json.Marshal(diffCorpus)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, stderr.Bytes())
	}
	var runs []diffRun
	if err := json.Unmarshal(out, &runs); err != nil || len(runs) != len(diffCorpus) {
		t.Fatalf("helper answered %d runs for %d cases: %v", len(runs), len(diffCorpus), err)
	}
	r := NewRoot("/")
	for i, c := range diffCorpus {
		ran := runs[i].Ran
		if c.Runs != "" && !slices.Contains(ran, c.Runs) {
			t.Errorf("%s -c %q: ran %q, not %s: the case tests nothing (output %q)", c.Shell, c.Src, ran, c.Runs, runs[i].Out)
		}
		in := Input{Command: "/usr/bin/" + c.Shell, Cwd: "/", Shell: &Shell{Source: c.Src}}
		if err := Complete(&in, r); err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Errorf("%s -c %q: %v", c.Shell, c.Src, err)
			}
			continue // denied
		}
		if in.Shell.Dynamic {
			continue // denied unless the policy opts in
		}
		listed := map[string]bool{}
		for _, cmd := range in.Shell.Commands {
			listed[path.Base(cmd.Command)] = true
			listed[path.Base(cmd.exe)] = true
			for _, v := range cmd.Via {
				w, _, _ := strings.Cut(v, " ")
				listed[w] = true
			}
		}
		for _, name := range ran {
			if !listed[name] {
				t.Errorf("%s -c %q ran %s, which the parser neither listed (%s) nor marked dynamic", c.Shell, c.Src, name, commandNames(in.Shell))
			}
		}
	}
}

func commandNames(sh *Shell) string {
	var names []string
	for _, c := range sh.Commands {
		names = append(names, strings.Join(append(slices.Clone(c.Via), c.Command), " > "))
	}
	return fmt.Sprintf("%q", names)
}

// diffBin lays out the directory the helper mounts on /usr/bin: every
// name of the host's program directories a link to the logging script,
// and the real wrappers and shells in .real.
func diffBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".real"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, w := range diffWrappers {
		if err := copyFile("/usr/bin/"+w, filepath.Join(dir, ".real", w)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	script := "#!/usr/bin/.real/dash\n" +
		"n=${0##*/}\n" +
		"echo \"$n\" >> /usr/bin/.log\n" +
		"case $n in\n" +
		"sh) exec /usr/bin/.real/dash \"$@\" ;;\n" +
		strings.Join(diffWrappers, "|") + ") exec /usr/bin/.real/$n \"$@\" ;;\n" +
		"esac\n"
	if err := os.WriteFile(filepath.Join(dir, ".log.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if err := os.Symlink(".log.sh", filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// diffHelper is pid 1 of a new mount and pid namespace: it puts dir over
// the program directories, runs each case read from stdin, waits for
// everything the case started (orphans are its children), and writes what
// ran. Its mounts and processes go with the namespaces when it exits.
func diffHelper(dir string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("make mounts private: %w", err))
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"} {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount(dir, d, "", unix.MS_BIND, ""); err != nil {
			return fail(fmt.Errorf("bind %s: %w", d, err))
		}
	}
	var cases []diffCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		return fail(err)
	}
	runs := make([]diffRun, len(cases))
	for i, c := range cases {
		r, err := diffOne(dir, c)
		if err != nil {
			return fail(err)
		}
		runs[i] = r
	}
	if err := json.NewEncoder(os.Stdout).Encode(runs); err != nil {
		return fail(err)
	}
	return 0
}

func diffOne(dir string, c diffCase) (diffRun, error) {
	const logFile = "/usr/bin/.log"
	work := filepath.Join(dir, ".work")
	if err := os.RemoveAll(work); err != nil {
		return diffRun{}, err
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		return diffRun{}, err
	}
	if err := os.WriteFile(logFile, nil, 0o666); err != nil {
		return diffRun{}, err
	}
	out, err := os.Create(filepath.Join(dir, ".out"))
	if err != nil {
		return diffRun{}, err
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/.real/"+c.Shell, "-c", c.Src)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + work}
	cmd.Dir = work
	cmd.Stdout, cmd.Stderr = out, out
	_ = cmd.Run() // its status is not the question
	// Wait for what the case left running; kill it after a while. As
	// pid 1 of the namespace, kill(-1) reaches the namespace's processes
	// only, which are all this helper's.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if pid <= 0 {
			if time.Now().After(deadline) {
				_ = unix.Kill(-1, unix.SIGKILL)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	log, err := os.ReadFile(logFile)
	if err != nil {
		return diffRun{}, err
	}
	text, _ := os.ReadFile(out.Name())
	return diffRun{Ran: strings.Fields(string(log)), Out: string(text)}, nil
}
