package box

import (
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Command is what runs inside a sandbox, modelled on [os/exec.Cmd]. It is
// handed to a sandbox at run time (package jail's Spec embeds it).
type Command struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH
	// inside the sandbox. Required. No shell is involved: to run a shell
	// string use []string{"/bin/sh", "-c", s}.
	Args []string

	// Env holds extra KEY=VALUE pairs. The command's environment is
	// PATH, HOME (the working directory), USER, LANG and these, which
	// override the fixed ones; nothing of jaild's own environment is
	// passed.
	Env []string

	// Dir is the working directory inside the sandbox; it must be the
	// sandbox's working directory (the jail Manager's Config.WorkDir, /work by
	// default), /tmp or below them (see CheckDir). Empty means the
	// working directory.
	Dir string

	// Stdin is the command's standard input. Nil means /dev/null. An
	// *os.File is handed over directly; any other reader is copied by a
	// goroutine that is abandoned (like os/exec's) if it still blocks in
	// Read after the command ends.
	Stdin io.Reader

	// Stdout and Stderr, if non-nil, receive each chunk of output as it is
	// produced, in addition to what Result keeps. A slow writer slows the
	// command down (the pipe fills), never the other way round; the
	// timeout still applies.
	Stdout, Stderr io.Writer

	// Timeout bounds the wall-clock run time; zero means DefaultTimeout.
	// When it expires every process of the sandbox is killed and Result
	// still carries the output produced so far.
	Timeout time.Duration

	// ExtraFiles are open files the command inherits as fds 3, 4, ...,
	// like os/exec's. The sandbox gets duplicates: the caller keeps and
	// closes its own, and a reader of a pipe whose write end is passed
	// sees EOF once the caller has closed its end and the sandbox is
	// gone. The files are handed over as they are, so a file the
	// command must reopen through /proc/self/fd must be owned by the
	// sandbox's user.
	ExtraFiles []*os.File

	// MaxOutput is how many bytes of each stream Result keeps; zero means
	// DefaultMaxOutput. Beyond it the head and the tail are kept with a
	// marker between them (see [Elide]); the rest is read and dropped, so
	// the command never blocks and memory does not grow with output size.
	MaxOutput int64
}

// Validate reports the first field of c that cannot be run in any
// sandbox. Whether Dir is writable depends on the sandbox's working
// directory, which the engine checks (see CheckDir).
func (c *Command) Validate() error {
	if len(c.Args) == 0 || c.Args[0] == "" {
		return invalid("command", "missing")
	}
	for _, a := range c.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("command", "argument contains a NUL byte")
		}
	}
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return invalid("env", "%q is not KEY=VALUE", kv)
		}
		if err := CheckEnv(k, v); err != nil {
			return err
		}
	}
	if c.Dir != "" {
		if strings.IndexByte(c.Dir, 0) >= 0 {
			return invalid("cwd", "contains a NUL byte")
		}
		if !path.IsAbs(c.Dir) {
			return invalid("cwd", "%q is not absolute", c.Dir)
		}
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		return invalid("timeout_ms", "%v: must be between 0 and %v", c.Timeout, MaxTimeout)
	}
	if c.MaxOutput < 0 {
		return invalid("max_output_bytes", "%d: must not be negative", c.MaxOutput)
	}
	return nil
}

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// CheckDir reports whether a command may start in dir in a sandbox whose
// working directory is workDir (empty: DefaultDir): dir must be workDir,
// /tmp or below them, the only places a sandbox writes. Empty dir means
// workDir. The error is an *InvalidError of field "cwd".
func CheckDir(dir, workDir string) error {
	if workDir == "" {
		workDir = DefaultDir
	}
	if dir == "" {
		return nil
	}
	if strings.IndexByte(dir, 0) >= 0 {
		return invalid("cwd", "contains a NUL byte")
	}
	if !path.IsAbs(dir) {
		return invalid("cwd", "%q is not absolute", dir)
	}
	if d := path.Clean(dir); !within(d, workDir) && !within(d, "/tmp") {
		return invalid("cwd", "%q is outside the sandbox's writable dirs %s and /tmp", dir, workDir)
	}
	return nil
}

// CheckEnv reports whether name=value can be a variable of a command's
// environment, by execve's rule: a name that is not empty and holds no '='
// or NUL, a value without NUL. Every request's env is checked by it, at
// the wire (package api) and in Validate. A session's own environment,
// which a shell carries from call to call, takes shell names only
// (package session).
func CheckEnv(name, value string) error {
	switch {
	case name == "":
		return invalid("env", "empty variable name")
	case strings.ContainsAny(name, "=\x00"):
		return invalid("env", "variable name %q contains '=' or a NUL byte", name)
	case strings.IndexByte(value, 0) >= 0:
		return invalid("env", "value of %s contains a NUL byte", name)
	}
	return nil
}

// EnvList is env as KEY=VALUE, sorted by name so that equal requests give
// equal commands (and audit hashes), each variable checked by CheckEnv.
func EnvList(env map[string]string) ([]string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var list []string
	for _, k := range keys {
		if err := CheckEnv(k, env[k]); err != nil {
			return nil, err
		}
		list = append(list, k+"="+env[k])
	}
	return list, nil
}
