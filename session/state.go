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
const stateMagic = "jaild-state-v1"

// shellPrelude is the first line of every shell call: an EXIT trap that
// reports the shell's state on fd 3. It uses builtins only (builtin
// printf and cd, [[ ]], ${!prefix@} and ${!name@a}), so it still works when
// the command has exhausted the pids limit, and is immune to functions the
// script defines with the same names. "${!a@}" lists the set variables
// whose names start with a, whatever IFS is.
var shellPrelude = func() string {
	var names strings.Builder
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_" {
		fmt.Fprintf(&names, ` "${!%c@}"`, c)
	}
	return `builtin trap '__jaild_rc=$?; builtin trap - EXIT; { builtin cd -P . 2>/dev/null; builtin printf "` + stateMagic + `\0%s\0" "$PWD"; ` +
		`for __jaild_n in` + names.String() + `; do [[ ${!__jaild_n@a} == *x* ]] && builtin printf "%s=%s\0" "$__jaild_n" "${!__jaild_n}"; done; } >&3 2>/dev/null; builtin exit $__jaild_rc' EXIT` + "\n"
}()

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

// parseState parses a report strictly: the magic, the directory, then
// KEY=VALUE records, each NUL-terminated, valid names, no duplicates.
// Exported functions (names with "%%") and neverCarried names are dropped;
// any other deviation rejects the whole report.
func parseState(data []byte) (*state, error) {
	if len(data) == 0 {
		return nil, errors.New("no report")
	}
	if data[len(data)-1] != 0 {
		return nil, errors.New("report truncated")
	}
	recs := bytes.Split(data[:len(data)-1], []byte{0})
	if len(recs) < 2 || string(recs[0]) != stateMagic {
		return nil, errors.New("not a state report")
	}
	st := &state{cwd: string(recs[1]), env: make(map[string]string)}
	if !path.IsAbs(st.cwd) {
		return nil, fmt.Errorf("directory %q is not absolute", st.cwd)
	}
	for _, r := range recs[2:] {
		k, v, ok := strings.Cut(string(r), "=")
		if strings.HasPrefix(k, "BASH_FUNC_") && ok {
			continue // an exported function
		}
		if !ok || !validName(k) {
			return nil, fmt.Errorf("bad variable record %.40q", r)
		}
		if _, dup := st.env[k]; dup {
			return nil, fmt.Errorf("variable %s reported twice", k)
		}
		st.env[k] = v
	}
	for k := range st.env {
		if neverCarried(k) {
			delete(st.env, k)
		}
	}
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
