package session

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"golang.org/x/sys/unix"
)

// Call is one command of a session. Exactly one of Shell and Args is set.
type Call struct {
	// Shell is a shell script, run with ShellPath -c; its directory and
	// exported variables carry over to the next call (see the package
	// doc).
	Shell string
	// ShellPath is the shell (inside the sandbox) that runs Shell: the one
	// the front end runs the same command in without a session. Empty
	// means DefaultShell (/bin/sh).
	ShellPath string
	// Command: Args (an argv, run as it is; nothing carries over from it),
	// Env and Dir for this call only (Dir overrides the session's
	// directory), Stdin, Stdout, Stderr, Timeout and MaxOutput as for
	// any sandbox. ExtraFiles must be empty: fd 3 is the session's.
	box.Command
	// Limits are this call's sandbox's resources; zero means the
	// session's.
	Limits box.Limits
	// Check, if not nil, is asked before anything is built, about the
	// call as it will run: spec holds the session's environment and
	// directory merged with the call's (Args are the call's: a shell
	// call's are ShellPath -c Shell, without the session's EXIT trap),
	// and workspace is the host directory the sandbox sees as its working
	// directory (Config.WorkDir). An
	// error refuses the call and is returned as it is. The spec is the
	// one that runs, so a decision on it is not raced by a concurrent
	// call's report or a SetEnv.
	Check func(ctx context.Context, spec *jail.Spec, workspace string) error
	// Description is what the caller says the call is for; a background
	// job reports it in its status. It changes nothing that runs.
	Description string
	// ReleaseOutput, if not nil, gives back the memory a background job's
	// output was admitted with (twice its MaxOutput, from the daemon's
	// output memory): Start calls it once the job's output is no longer
	// kept, when the job is forgotten (its session's oldest ended job
	// making room for a new one, or the session's removal). A Start that
	// fails does not call it: the caller keeps it. It must be safe to
	// call more than once. Run ignores it.
	ReleaseOutput func()
}

func (c *Call) validate() error {
	switch {
	case c.Shell == "" && len(c.Args) == 0:
		return invalid("command", "missing")
	case c.Shell != "" && len(c.Args) > 0:
		return invalid("command", "both a shell script and an argv")
	case strings.IndexByte(c.Shell, 0) >= 0:
		return invalid("command", "contains a NUL byte")
	case len(c.ExtraFiles) > 0:
		return invalid("command", "extra files are not available in a session")
	}
	return nil
}

// shell returns the shell that runs c.Shell.
func (c *Call) shell() string {
	if c.ShellPath == "" {
		return DefaultShell
	}
	return c.ShellPath
}

// Run runs call in a fresh sandbox on the session's workspace and waits for
// it. A shell call's directory and exported variables become the session's
// (see the package doc). Removing the session kills the call; its result is
// then Canceled and the error is ErrClosed.
func (s *Session) Run(ctx context.Context, call *Call) (*box.Result, error) {
	if err := call.validate(); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	spec, callEnv := s.spec(call)
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := s.check(ctx, call, spec); err != nil {
		return nil, err
	}
	nonce := newNonce()
	if call.Shell != "" {
		spec.Args = []string{call.shell(), "-c", shellPrelude(call.shell(), nonce) + call.Shell}
	}

	var (
		stateR, stateW *os.File
		report         chan []byte
	)
	if call.Shell != "" {
		var err error
		if stateR, stateW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create state pipe: %w", err)
		}
		defer stateR.Close()
		spec.ExtraFiles = []*os.File{stateW}
		report = make(chan []byte, 1)
		go func() {
			data, err := readState(stateR)
			if err != nil {
				s.m.log.Warn("session state report", "id", s.id, "err", err)
				data = nil
			}
			report <- data
		}()
	}

	ctx, cancel := s.bind(ctx)
	defer cancel()
	res, err := s.ws.Run(ctx, spec)
	if stateW != nil {
		// The sandbox is gone: closing our end gives the reader EOF.
		stateW.Close()
		data := <-report
		if err == nil && res != nil && !res.TimedOut && !res.Canceled {
			s.apply(data, callEnv, nonce)
		}
	}
	switch {
	case err != nil && s.ctx.Err() != nil && ctx.Err() != nil:
		err = fmt.Errorf("%w: session %s was removed during the call", ErrClosed, s.id)
	case err != nil && s.lost():
		err = fmt.Errorf("%w: session %s was lost during the call: %w", ErrNotFound, s.id, err)
	}
	return res, err
}

// bind returns a context that ends with ctx or with the session.
func (s *Session) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// check asks call.Check about spec, if there is one.
func (s *Session) check(ctx context.Context, call *Call, spec *jail.Spec) error {
	if call.Check == nil {
		return nil
	}
	return call.Check(ctx, spec, s.ws.Dir())
}

// spec turns a call into a sandbox spec on the workspace, with the
// session's directory and environment; a shell call's Args are its shell
// -c its script. It returns the call's own environment, which a shell
// report must not make permanent.
func (s *Session) spec(call *Call) (*jail.Spec, map[string]string) {
	s.mu.Lock()
	env := make([]string, 0, len(s.env)+len(call.Env))
	for _, kv := range envList(s.env) {
		env = append(env, kv)
	}
	cwd := s.cwd
	limits := s.limits
	s.mu.Unlock()

	callEnv := make(map[string]string, len(call.Env))
	for _, kv := range call.Env {
		k, v, _ := strings.Cut(kv, "=")
		callEnv[k] = v
	}
	spec := &jail.Spec{Limits: limits, Command: call.Command}
	if call.Limits != (box.Limits{}) {
		spec.Limits = call.Limits
	}
	spec.Env = append(env, call.Env...)
	if spec.Dir == "" {
		spec.Dir = s.existingDir(cwd)
	}
	if call.Shell != "" {
		spec.Args = []string{call.shell(), "-c", call.Shell}
	}
	return spec, callEnv
}

// existingDir returns dir if it is a directory of the workspace now, else
// the working directory: a session's directory may have been removed since, and a sandbox
// whose directory is missing would not start. It is resolved beneath the
// workspace's tmpfs without following any symlink (the physical directory
// a shell reported has none), as an O_PATH lookup that opens nothing.
func (s *Session) existingDir(dir string) string {
	workDir := s.m.cfg.WorkDir
	if dir == workDir || !inWork(dir, workDir) {
		return workDir
	}
	root, err := unix.Open(s.ws.Dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return workDir
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(dir, workDir+"/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return workDir
	}
	unix.Close(fd)
	return dir
}

// fixedEnv is what every sandbox's environment starts with (see jail's
// Command.Env), in sandboxes whose working directory is workDir.
func fixedEnv(workDir string) map[string]string {
	return map[string]string{"PATH": jail.Path, "HOME": workDir, "USER": "sandbox", "LANG": "C.UTF-8"}
}

// apply takes a shell call's report as the session's new directory and
// environment; an invalid report changes nothing.
func (s *Session) apply(data []byte, callEnv map[string]string, nonce string) {
	if data == nil {
		return
	}
	st, err := parseState(data, nonce)
	if err != nil {
		s.m.log.Warn("session state report rejected", "id", s.id, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A variable the call's Env set, which the script left as it was, is
	// the call's, not the session's.
	for k, v := range callEnv {
		if got, ok := st.env[k]; ok && got == v {
			if old, had := s.env[k]; had {
				st.env[k] = old
			} else {
				delete(st.env, k)
			}
		}
	}
	// The sandbox's fixed variables come back in every report; they are
	// the session's only if it set them.
	workDir := s.m.cfg.WorkDir
	for k, v := range fixedEnv(workDir) {
		if _, had := s.env[k]; !had && st.env[k] == v {
			delete(st.env, k)
		}
	}
	s.env = st.env
	if cwd := path.Clean(st.cwd); inWork(cwd, workDir) {
		s.cwd = cwd
	} else {
		s.cwd = workDir
	}
}
