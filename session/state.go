package session

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/jaild/jaild/box"
)

// MaxState bounds the report a shell call's EXIT trap writes on fd 3 (its
// directory and exported variables). A larger report is discarded whole:
// an environment that size would not fit the next execve anyway.
const MaxState = 256 << 10

// stateMagic starts every report, so that output that merely happens to
// reach fd 3 is never taken for one. The call's nonce follows it.
const stateMagic = "jaild-state-v3"

// newNonce returns a call's report nonce: 128 random bits in hex, which
// only the trap's text holds. A script that writes a report of its own
// to fd 3 (and then execs, so that the trap never runs) must read the
// nonce at run time and build the report from it, which a literal shell
// string cannot do; the policy's shell parse marks the expansions that
// could (Shell.Dynamic). It is no secret from a program that can read
// /proc/1/cmdline and compose a report, so what a report may carry is
// bounded on jaild's side anyway (neverCarried).
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// DefaultShell runs a shell call whose Call.ShellPath is empty: the shell a
// one-shot `{"command"}` runs in.
const DefaultShell = "/bin/sh"

// shellPrelude returns the first line of a shell call run by shell: an EXIT
// trap that reports the shell's state on fd 3, as the magic, the call's
// nonce and the physical working directory (cd -P .), each NUL-terminated,
// then `export -p` and a final NUL. It works in any POSIX shell (dash, bash, bash in posix mode)
// and uses builtins only, so that it still works when the command has
// exhausted the pids limit. Each command word is quoted (\cd), which no
// alias matches. A function the script defines with a builtin's name is not
// run instead: bash (not in posix mode) lets a function take any name, so
// there each command goes through `builtin`; other shells keep the special
// builtins (trap, set, unset, export, exit) from functions, and the trap
// unsets the functions cd and printf first. `set +eu` keeps a failing cd or
// an unset PWD from ending the trap early under the script's own `set -eu`.
func shellPrelude(shell, nonce string) string {
	if strings.HasPrefix(path.Base(shell), "bash") {
		return prelude(`\builtin `, "", nonce)
	}
	return prelude(`\`, `\unset -f cd printf 2>/dev/null; `, nonce)
}

// prelude spells the trap with b before each command word (`\` or
// `\builtin `) and unfunc run before the report.
func prelude(b, unfunc, nonce string) string {
	return b + `trap '__jaild_rc=$?; ` + b + `trap - EXIT; ` + b + `set +eu; ` + unfunc + `{ ` +
		b + `cd -P . 2>/dev/null; ` + b + `printf "` + stateMagic + `\0%s\0%s\0" ` + nonce + ` "$PWD"; ` +
		b + `export -p; ` + b + `printf "\0"; } >&3 2>/dev/null; ` + b + `exit "$__jaild_rc"' EXIT` + "\n"
}

// neverCarried reports whether an exported variable stays out of the
// session's environment. A report is written by the script's own shell,
// so it can say anything the script wants (see newNonce): whatever it
// carries reaches every later call, whose policy decision sees it in
// input.env. What it must never carry is what changes, unseen by any
// policy, how an allowed program behaves:
//
//   - the shell's own bookkeeping, which a next shell sets for itself or
//     which would change how it starts or what it runs besides the
//     script: PWD, OLDPWD, SHLVL, _, SHELLOPTS, BASHOPTS, ENV, BASH_*
//     (BASH_ENV, exported functions), PS0-PS4 (PS4 is expanded, command
//     substitutions included, by set -x), PROMPT_COMMAND, IFS, CDPATH
//     and GLOBIGNORE (a script string would split, cd and glob otherwise
//     than it reads);
//   - what the dynamic loader and the C library take from the
//     environment to load code or read files that change a program:
//     every LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...) and the rest
//     of glibc's unsecure list (unsecvars.h: the variables ld.so drops
//     for setuid programs): GCONV_PATH, GETCONF_DIR, GLIBC_TUNABLES,
//     HOSTALIASES, LOCALDOMAIN, LOCPATH, MALLOC_TRACE, NIS_PATH,
//     NLSPATH, RESOLV_HOST_CONF, RES_OPTIONS, TZDIR. Its TMPDIR stays:
//     /tmp is the sandbox's own, and TMPDIR=$HOME/tmp is an ordinary
//     agent step.
//
// Program-specific hooks (PYTHONPATH, NODE_OPTIONS, GIT_*...) carry over
// and are the policy's to judge in input.env.
func neverCarried(name string) bool {
	switch name {
	case "PWD", "OLDPWD", "SHLVL", "_", "SHELLOPTS", "BASHOPTS", "ENV",
		"PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE",
		"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
		"MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR":
		return true
	}
	return strings.HasPrefix(name, "BASH_") || strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "__jaild_")
}

// state is what a shell call reported.
type state struct {
	cwd string
	env map[string]string
}

// parseState parses a report strictly: the magic, the call's nonce and the
// directory, each NUL-terminated, then the output of `export -p` (see
// parseExports) and a final NUL. neverCarried names are dropped; any
// deviation, another nonce included, rejects the whole report.
func parseState(data []byte, nonce string) (*state, error) {
	if len(data) == 0 {
		return nil, errors.New("no report")
	}
	if data[len(data)-1] != 0 {
		return nil, errors.New("report truncated")
	}
	magic, rest, _ := bytes.Cut(data, []byte{0})
	if string(magic) != stateMagic {
		return nil, errors.New("not a state report")
	}
	got, rest, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		return nil, errors.New("report truncated")
	}
	if nonce == "" || string(got) != nonce {
		return nil, errors.New("not this call's report: another nonce")
	}
	cwd, exports, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		return nil, errors.New("report truncated")
	}
	exports = exports[:len(exports)-1]
	if bytes.IndexByte(exports, 0) >= 0 {
		return nil, errors.New("not a state report: a NUL in the variables")
	}
	st := &state{cwd: string(cwd)}
	if !path.IsAbs(st.cwd) {
		return nil, fmt.Errorf("directory %q is not absolute", st.cwd)
	}
	env, err := parseExports(exports)
	if err != nil {
		return nil, err
	}
	for k := range env {
		if neverCarried(k) {
			delete(env, k)
		}
	}
	st.env = env
	return st, nil
}

// readState reads at most MaxState bytes of a report from r, then drains
// it, so the shell never blocks on a full pipe.
func readState(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxState+1))
	_, _ = io.Copy(io.Discard, r)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxState {
		return nil, fmt.Errorf("report exceeds %d bytes", MaxState)
	}
	return data, nil
}

// CheckEnvName reports whether name can be a variable of a session's
// environment (see validName); the error is an *box.InvalidError of field
// "env".
func CheckEnvName(name string) error {
	if !validName(name) {
		return invalid("env", "%q is not a variable name", name)
	}
	return nil
}

// validName reports whether k can be a variable of a session's
// environment: a shell name, since the shell of each call exports it to
// the next through the state report (see exports.go). Any request's env
// is checked by execve's wider rule first (box.CheckEnv).
func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// parseEnv checks KEY=VALUE pairs; later pairs override earlier ones.
func parseEnv(pairs []string) (map[string]string, error) {
	env := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validName(k) {
			return nil, invalid("env", "%q is not KEY=VALUE with a valid name", kv)
		}
		if err := box.CheckEnv(k, v); err != nil {
			return nil, err
		}
		env[k] = v
	}
	return env, nil
}

// inWork reports whether the sandbox path p is the working directory
// workDir or below it.
func inWork(p, workDir string) bool { return p == workDir || strings.HasPrefix(p, workDir+"/") }
