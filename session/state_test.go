package session

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
)

// testNonce is the nonce of the reports report builds.
const testNonce = "0123456789abcdef0123456789abcdef"

// report builds a report around an `export -p` text.
func report(cwd, exports string) []byte {
	return []byte(stateMagic + "\x00" + testNonce + "\x00" + cwd + "\x00" + exports + "\x00")
}

func TestParseState(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		wantErr string
		cwd     string
		env     map[string]string
	}{
		{name: "dash", data: report("/work/a", "export PWD='/work/a'\nexport X='1'\nexport Y='a=b\nc'\nexport Q='it'\"'\"'s'\nexport SHLVL='1'\nexport U\n"),
			cwd: "/work/a", env: map[string]string{"X": "1", "Y": "a=b\nc", "Q": "it's"}},
		{name: "bash", data: report("/work", strings.Join([]string{
			`declare -x OLDPWD`,
			`declare -x A="\"\$x\\y` + "\\`" + `"`,
			`declare -rx R="1"`,
			`declare -ix N="3"`,
			`declare -ax ARR=([0]="1" [1]="2")`,
			`declare -x B=$'\351t\n\'q'`,
			`declare -x E=""`, ""}, "\n")), cwd: "/work", env: map[string]string{"A": "\"$x\\y`", "R": "1", "N": "3", "B": "\xe9t\n'q", "E": ""}},
		{name: "bash posix", data: report("/work", "export X=\"1\"\nexport -a ARR=([0]=\"1\")\nexport U\n"), cwd: "/work", env: map[string]string{"X": "1"}},
		{name: "non-UTF-8 and private runes", data: report("/work", "export X='\xff\xfe\U0010ff41 \xe9'\n"), cwd: "/work", env: map[string]string{"X": "\xff\xfe\U0010ff41 \xe9"}},
		{name: "nothing exported", data: report("/", ""), cwd: "/", env: map[string]string{}},
		{name: "empty", data: nil, wantErr: "no report"},
		{name: "truncated", data: []byte(stateMagic + "\x00" + testNonce + "\x00/work\x00export X='1'"), wantErr: "truncated"},
		{name: "no directory", data: []byte(stateMagic + "\x00" + testNonce + "\x00"), wantErr: "truncated"},
		{name: "no nonce", data: []byte(stateMagic + "\x00/work\x00export X='1'\n\x00"), wantErr: "nonce"},
		{name: "another nonce", data: []byte(stateMagic + "\x00fedcba9876543210fedcba9876543210\x00/work\x00export X='1'\n\x00"), wantErr: "nonce"},
		{name: "v2 report", data: []byte("jaild-state-v2\x00/work\x00export X='1'\n\x00"), wantErr: "not a state report"},
		// What a script's own report could carry that no policy sees:
		// the loader's and the shells' hooks are dropped, the rest kept.
		{name: "loader and shell hooks", data: report("/work", strings.Join([]string{
			"export LD_PRELOAD='/work/evil.so'", "export LD_LIBRARY_PATH='/work'", "export LD_AUDIT='/work/a.so'",
			"export GCONV_PATH='/work/gconv'", "export GLIBC_TUNABLES='x'", "export LOCPATH='/work'", "export NLSPATH='/work/%N'",
			"export HOSTALIASES='/work/h'", "export RES_OPTIONS='debug'", "export TZDIR='/work'", "export MALLOC_TRACE='/work/m'",
			"export PS4='$(id)'", "export PS1='x'", "export PROMPT_COMMAND='id'", "export ENV='/work/rc'", "export BASH_ENV='/work/rc'",
			"export IFS='/'", "export CDPATH='/tmp'", "export GLOBIGNORE='*'", "export SHELLOPTS='xtrace'",
			"export PATH='/work/bin:/usr/bin'", "export TMPDIR='/work/tmp'", "export PYTHONPATH='/work/py'", ""}, "\n")),
			cwd: "/work", env: map[string]string{"PATH": "/work/bin:/usr/bin", "TMPDIR": "/work/tmp", "PYTHONPATH": "/work/py"}},
		{name: "no magic", data: []byte("junk\x00/work\x00\x00"), wantErr: "not a state report"},
		{name: "old magic", data: []byte("jaild-state-v1\x00/work\x00X=1\x00"), wantErr: "not a state report"},
		{name: "junk before magic", data: append([]byte("junk"), report("/work", "")...), wantErr: "not a state report"},
		{name: "NUL among variables", data: report("/work", "export X='1'\x00export Y='2'\n"), wantErr: "NUL"},
		{name: "relative dir", data: report("work", ""), wantErr: "not absolute"},
		{name: "bad name", data: report("/work", "export 1X='1'\n"), wantErr: "variables"},
		{name: "expansion", data: report("/work", "export X=\"$HOME\"\n"), wantErr: "quoted literal"},
		{name: "command substitution", data: report("/work", "export X=\"$(id)\"\n"), wantErr: "quoted literal"},
		{name: "locale string", data: report("/work", "declare -x X=$\"1\"\n"), wantErr: "quoted literal"},
		{name: "arithmetic", data: report("/work", "export X=\"$((1+1))\"\n"), wantErr: "quoted literal"},
		{name: "two flag words", data: report("/work", "declare -x -r X=\"1\"\n"), wantErr: "2 names"},
		{name: "unquoted", data: report("/work", "export X=1\n"), wantErr: "quoted literal"},
		{name: "tilde", data: report("/work", "export X=~root\n"), wantErr: "quoted literal"},
		{name: "another command", data: report("/work", "export X='1'\nrm -rf /work\n"), wantErr: "not an export"},
		{name: "two commands on a line", data: report("/work", "export X='1'; export Y='2'\n"), wantErr: "not a plain"},
		{name: "pipeline", data: report("/work", "export X='1' | cat\n"), wantErr: "not an export"},
		{name: "redirection", data: report("/work", "export X='1' >/work/f\n"), wantErr: "not a plain"},
		{name: "background", data: report("/work", "export X='1' &\n"), wantErr: "not a plain"},
		{name: "comment", data: report("/work", "# hi\nexport X='1'\n"), wantErr: "not a plain"},
		{name: "trailing comment", data: report("/work", "export X='1'\n# hi\n"), wantErr: "comment"},
		{name: "readonly", data: report("/work", "readonly X='1'\n"), wantErr: "not an export"},
		{name: "declare without x", data: report("/work", "declare -r X=\"1\"\n"), wantErr: "without -x"},
		{name: "unknown flag", data: report("/work", "declare -xf X=\"1\"\n"), wantErr: "flags"},
		{name: "two names", data: report("/work", "export X='1' Y='2'\n"), wantErr: "2 names"},
		{name: "append", data: report("/work", "export X+='1'\n"), wantErr: "not NAME=value"},
		{name: "array without -a", data: report("/work", "export X=('1')\n"), wantErr: "array"},
		{name: "duplicate", data: report("/work", "export X='1'\nexport X='2'\n"), wantErr: "twice"},
		{name: "syntax error", data: report("/work", "export X='1\n"), wantErr: "variables"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseState(tt.data, testNonce)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.cwd != tt.cwd || !maps.Equal(st.env, tt.env) {
				t.Fatalf("got %q %q, want %q %q", st.cwd, st.env, tt.cwd, tt.env)
			}
		})
	}
}

// TestShellReport runs the prelude in the host's shells (dash as /bin/sh,
// bash, and bash in posix mode, as a bash named sh) on scripts that set
// hard values, and parses what their EXIT trap wrote on fd 3.
func TestShellReport(t *testing.T) {
	bashAsSh := filepath.Join(t.TempDir(), "sh")
	if err := os.Symlink("/bin/bash", bashAsSh); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	phys := filepath.Join(dir, "phys")
	if err := os.Mkdir(phys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(phys, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	hard := map[string]string{
		"SQ": "it's '\\'' \"q\"", "NL": "a\nb\n", "DL": "$HOME `id` $(id) ${X}", "BS": `\\ \n \`,
		"CTL": "\t\x01\x1b[0m", "UTF": "é€😀", "BIN": "\xe9\xff", "EMPTY": "", "SP": " a  b ",
		"EQ": "a=b=c", "KEEP": "k",
	}
	common := `cd ` + dir + `/link
export SQ="it's '\\'' \"q\"" NL="$(printf 'a\nb\n_')" DL='$HOME ` + "`id`" + ` $(id) ${X}' BS='\\ \n \'
NL=${NL%_}
export CTL="$(printf '\t\001\033[0m')" UTF='é€😀' BIN="$(printf '\351\377')" EMPTY= SP=' a  b ' EQ=a=b=c
unset GONE
export NEVERSET
LOCAL=1
readonly RO=r; export RO
`
	shells := []struct{ name, path, extra string }{
		{"dash", "/bin/sh", ""},
		{"bash", "/bin/bash", "f() { :; }; export -f f; declare -ax ARR=(1 2)\n"},
		{"bash posix", bashAsSh, "f() { :; }; export -f f\n"},
	}
	scripts := []struct {
		name, script string
		exit         int
		bashOnly     bool
	}{
		{"plain", "", 0, false},
		{"exit status", "exit 7", 7, false},
		{"set -eu and a failing command", "set -eu; false", 1, false},
		{"functions named like the builtins", "cd() { echo fn; }; printf() { echo fn; }; command() { echo fn; }; exit 4", 4, false},
		// Only bash (not in posix mode) lets a function take a special
		// builtin's name.
		{"functions named like the special builtins", "exit() { echo fn; }; trap() { echo fn; }; set() { echo fn; }; export() { echo fn; }; builtin exit 5", 5, true},
		{"aliases named like the builtins", "alias cd='echo fn' printf='echo fn' unset='echo fn' command='echo fn'; exit 6", 6, false},
		{"IFS and noclobber", "IFS=0123456789; set -C; exit 3", 3, false},
		{"cwd removed", "mkdir " + dir + "/gone; cd " + dir + "/gone; rmdir " + dir + "/gone; cd " + dir + "/link", 0, false},
	}
	for _, sh := range shells {
		for _, sc := range scripts {
			if sc.bashOnly && sh.path != "/bin/bash" {
				continue
			}
			t.Run(sh.name+"/"+sc.name, func(t *testing.T) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); w.Close() })
				cmd := exec.Command(sh.path, "-c", shellPrelude(sh.path, testNonce)+common+sh.extra+sc.script)
				cmd.Env = []string{"PATH=/usr/bin:/bin", "GONE=g", "KEEP=k", "LANG=C.UTF-8"}
				cmd.ExtraFiles = []*os.File{w}
				out, err := cmd.CombinedOutput()
				w.Close()
				if code := cmd.ProcessState.ExitCode(); code != sc.exit {
					t.Fatalf("exit %d, want %d (%v): %s", code, sc.exit, err, out)
				}
				data, err := readState(r)
				if err != nil {
					t.Fatal(err)
				}
				st, err := parseState(data, testNonce)
				if err != nil {
					t.Fatalf("%v in %q", err, data)
				}
				want := maps.Clone(hard)
				want["PATH"], want["LANG"], want["RO"] = "/usr/bin:/bin", "C.UTF-8", "r"
				if st.cwd != phys || !maps.Equal(st.env, want) {
					t.Errorf("got %q %q\nwant %q %q", st.cwd, st.env, phys, want)
				}
			})
		}
	}
}

func TestReadStateBound(t *testing.T) {
	if _, err := readState(strings.NewReader(strings.Repeat("x", MaxState+1))); err == nil {
		t.Error("a report over MaxState was accepted")
	}
}

func TestStream(t *testing.T) {
	b := newStream(20) // head 10, tail 10
	b.Write([]byte("0123456789"))
	if got, next := b.read(0); got != "0123456789" || next != 10 {
		t.Fatalf("read(0) = %q, %d", got, next)
	}
	b.Write([]byte("abcde"))
	if got, next := b.read(10); got != "abcde" || next != 15 {
		t.Fatalf("read(10) = %q, %d", got, next)
	}
	for range 10 {
		b.Write([]byte("ABCDEFGHIJ")) // forces compaction of the tail
	}
	got, next := b.read(0)
	if want := "0123456789" + box.Elide(95) + "ABCDEFGHIJ"; got != want || next != 115 {
		t.Fatalf("read(0) = %q, %d; want %q", got, next, want)
	}
	if got, _ := b.read(107); got != "CDEFGHIJ" {
		t.Errorf("read(107) = %q", got)
	}
	if got, _ := b.read(12); got != box.Elide(93)+"ABCDEFGHIJ" {
		t.Errorf("read(12) = %q", got)
	}
	if got, next := b.read(500); got != "" || next != 115 {
		t.Errorf("read past the end = %q, %d", got, next)
	}
}

// BenchmarkParseState: jaild's side of a report, for a typical agent's
// environment (30 variables) as dash and bash print it.
func BenchmarkParseState(b *testing.B) {
	var dash, bash strings.Builder
	for i := range 30 {
		fmt.Fprintf(&dash, "export VAR_%d='value %d with '\"'\"'quotes'\"'\"' and $dollars'\n", i, i)
		fmt.Fprintf(&bash, "declare -x VAR_%d=\"value %d with 'quotes' and \\$dollars\"\n", i, i)
	}
	for _, sh := range []struct{ name, text string }{{"dash", dash.String()}, {"bash", bash.String()}} {
		data := report("/work/src", sh.text)
		b.Run(sh.name, func(b *testing.B) {
			for range b.N {
				if st, err := parseState(data, testNonce); err != nil || len(st.env) != 30 {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzParseExports: any text either parses into valid names or is
// rejected; it never panics.
func FuzzParseExports(f *testing.F) {
	for _, s := range []string{"export X='1'\n", "declare -rx A=$'\\351'\n", "export -a A=([0]=\"1\")\n", "export X=\"$(id)\"\n", "export X='\xff'\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		env, err := parseExports([]byte(text))
		for k := range env {
			if err != nil || !validName(k) {
				t.Fatalf("%q: name %q, err %v", text, k, err)
			}
		}
	})
}
