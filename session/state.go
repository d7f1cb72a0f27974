package session

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

const workDir = "/work"

// MaxState bounds the report a shell call's EXIT trap writes on fd 3 (its
// directory and exported variables). A larger report is discarded whole:
// an environment that size would not fit the next execve anyway.
const MaxState = 256 << 10

// stateMagic starts every report, so that output that merely happens to
// reach fd 3 is never taken for one.
const stateMagic = "jaild-state-v2"

// DefaultShell runs a shell call whose Call.ShellPath is empty: the shell a
// one-shot `{"command"}` runs in.
const DefaultShell = "/bin/sh"

// shellPrelude returns the first line of a shell call run by shell: an EXIT
// trap that reports the shell's state on fd 3, as the magic, the physical
// working directory (cd -P .), each NUL-terminated, then `export -p` and a
// final NUL. It works in any POSIX shell (dash, bash, bash in posix mode)
// and uses builtins only, so that it still works when the command has
// exhausted the pids limit. Each command word is quoted (\cd), which no
// alias matches. A function the script defines with a builtin's name is not
// run instead: bash (not in posix mode) lets a function take any name, so
// there each command goes through `builtin`; other shells keep the special
// builtins (trap, set, unset, export, exit) from functions, and the trap
// unsets the functions cd and printf first. `set +eu` keeps a failing cd or
// an unset PWD from ending the trap early under the script's own `set -eu`.
func shellPrelude(shell string) string {
	if strings.HasPrefix(path.Base(shell), "bash") {
		return bashPrelude
	}
	return posixPrelude
}

var (
	posixPrelude = prelude(`\`, `\unset -f cd printf 2>/dev/null; `)
	bashPrelude  = prelude(`\builtin `, "")
)

// prelude spells the trap with b before each command word (`\` or
// `\builtin `) and unfunc run before the report.
func prelude(b, unfunc string) string {
	return b + `trap '__jaild_rc=$?; ` + b + `trap - EXIT; ` + b + `set +eu; ` + unfunc + `{ ` +
		b + `cd -P . 2>/dev/null; ` + b + `printf "` + stateMagic + `\0%s\0" "$PWD"; ` +
		b + `export -p; ` + b + `printf "\0"; } >&3 2>/dev/null; ` + b + `exit "$__jaild_rc"' EXIT` + "\n"
}

// neverCarried reports whether an exported variable stays out of the
// session's environment: the shell's own bookkeeping, which a next shell
// sets for itself or which would change how it starts.
func neverCarried(name string) bool {
	switch name {
	case "PWD", "OLDPWD", "SHLVL", "_", "SHELLOPTS", "BASHOPTS", "BASH_ENV", "ENV":
		return true
	}
	return strings.HasPrefix(name, "BASH_") || strings.HasPrefix(name, "__jaild_")
}

// state is what a shell call reported.
type state struct {
	cwd string
	env map[string]string
}

// parseState parses a report strictly: the magic and the directory, each
// NUL-terminated, then the output of `export -p` (see parseExports) and a
// final NUL. neverCarried names are dropped; any deviation rejects the
// whole report.
func parseState(data []byte) (*state, error) {
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
		if strings.IndexByte(v, 0) >= 0 {
			return nil, invalid("env", "%s contains a NUL byte", k)
		}
		env[k] = v
	}
	return env, nil
}

func inWork(p string) bool { return p == workDir || strings.HasPrefix(p, workDir+"/") }
