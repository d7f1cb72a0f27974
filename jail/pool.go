package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
)

// A Pool keeps sandboxes started ahead of time and hands each the command of
// one run at request time, so that a run does not wait for a sandbox to be
// built: most of a sandbox's cost (namespaces, cgroups, mounts, the
// re-executed init, seccomp) is paid while no one waits.
//
// A pooled sandbox is an ordinary one (same limits, same isolation, the same
// teardown and crash sweep) whose init is a shell that blocks reading its
// script from a pipe. At request time the pool writes a short script that
// looks the command up as a fresh sandbox's init would (so a missing or
// non-executable command gives the same ErrNotFound or ErrNotExecutable),
// then execs /usr/bin/env with exactly the command's environment, which
// execs the command: the command is still the pid namespace's init, and
// nothing of the shell remains. The shell's start counts in the sandbox's
// CPU time and peak memory (well under a millisecond and a megabyte).
//
// Runs that a pooled sandbox cannot serve go to a fresh sandbox as
// [Manager.Run] builds it: other limits than the pool's, a working directory
// other than /work, a prepared rootfs (it may have no /bin/sh or env), or a
// command name that env would misread (starting with "-" or holding "=").
type Pool struct {
	m        *Manager
	limits   Limits
	ready    chan *warm
	room     chan struct{} // a token per place in the pool not yet filled
	stop     chan struct{}
	wg       sync.WaitGroup // the refill loop
	hits     atomic.Int64
	building atomic.Int32 // sandboxes being started for the pool
	misses   atomic.Int64
	once     sync.Once
}

// warm is a started sandbox waiting for its command.
type warm struct {
	sb     *sandbox
	r      *running
	script *os.File // write end of the shell's fd 3
	status *os.File // read end of the shell's fd 4
}

// poolShell is the pooled sandbox's init: it reads and runs its script from
// fd 3, which the pool writes and closes at request time. The script
// reports a command it cannot run on fd 4, which the command never gets, so
// the command cannot forge that report.
var poolShell = []string{"/bin/sh", "-c", ". /proc/self/fd/3"}

// NewPool starts a pool that keeps size sandboxes with limits l ready. Close
// it before closing m.
func (m *Manager) NewPool(size int, l Limits) (*Pool, error) {
	if size <= 0 {
		return nil, fmt.Errorf("jail: pool size %d: must be positive", size)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		m:      m,
		limits: l.WithDefaults(),
		ready:  make(chan *warm, size),
		room:   make(chan struct{}, size),
		stop:   make(chan struct{}),
	}
	for range size {
		p.room <- struct{}{}
	}
	p.wg.Add(1)
	go p.refill()
	return p, nil
}

// refill keeps the pool full. A failing start backs off, so that a broken
// host is not hammered, and is logged.
func (p *Pool) refill() {
	defer p.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		// Build only for a free place: the pool never holds more than
		// its size.
		select {
		case <-p.room:
		case <-p.stop:
			return
		}
		p.building.Add(1)
		w, err := p.prestart()
		p.building.Add(-1)
		if err != nil {
			p.room <- struct{}{}
			p.m.log.Warn("starting a pooled sandbox", "err", err, "retry_in", backoff)
			select {
			case <-p.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		p.ready <- w // never blocks: ready has a place per token
	}
}

// prestart builds a sandbox and starts its waiting shell.
func (p *Pool) prestart() (_ *warm, retErr error) {
	sb, err := p.m.create(context.Background(), p.limits, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = sb.Destroy()
		}
	}()
	scriptR, scriptW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create script pipe: %w", err)
	}
	// The shell reopens the pipe through /proc/self/fd/3, which checks the
	// pipe's owner: make it the sandbox user's.
	if err := scriptR.Chown(sb.slot.hostID()+SandboxUID, sb.slot.hostID()+SandboxGID); err != nil {
		scriptR.Close()
		scriptW.Close()
		return nil, fmt.Errorf("chown script pipe: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		scriptR.Close()
		scriptW.Close()
		return nil, fmt.Errorf("create status pipe: %w", err)
	}
	proc := &libcontainer.Process{
		Args:       poolShell,
		Env:        environ(nil),
		Cwd:        DefaultDir,
		UID:        SandboxUID,
		GID:        SandboxGID,
		ExtraFiles: []*os.File{scriptR, statusW},
		Init:       true,
	}
	sb.used = true
	// A pipe for stdin whatever the command will want: it is fed or
	// closed at request time.
	r, err := sb.startProcess(proc, pipeStdin{})
	if err != nil {
		scriptR.Close()
		scriptW.Close()
		statusR.Close()
		statusW.Close()
		return nil, fmt.Errorf("start pooled sandbox: %w", err)
	}
	return &warm{sb: sb, r: r, script: scriptW, status: statusR}, nil
}

// pipeStdin makes startProcess give the process a stdin pipe; collect
// replaces it with the command's own stdin.
type pipeStdin struct{}

func (pipeStdin) Read([]byte) (int, error) { return 0, errors.New("no stdin") }

// destroy tears a sandbox down that never got a command.
func (w *warm) destroy() {
	w.script.Close()
	w.status.Close()
	w.r.outR.Close()
	w.r.errR.Close()
	w.r.stdinW.Close()
	_ = w.sb.Destroy()
}

// Run implements the same contract as [Manager.Run], on a pooled sandbox
// when one is ready and can serve spec, else on a fresh one.
func (p *Pool) Run(ctx context.Context, spec *Spec) (*Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if !p.serves(spec) {
		return p.m.Run(ctx, spec)
	}
	var w *warm
	select {
	case w = <-p.ready:
		p.room <- struct{}{}
	default:
		p.misses.Add(1)
		return p.m.Run(ctx, spec)
	}
	p.hits.Add(1)
	res, err := p.handover(ctx, w, &spec.Command)
	// The caller has its answer; the teardown need not delay it (see
	// teardown.go).
	if derr := p.m.release(w.sb); err == nil {
		err = derr
	}
	return res, err
}

// serves reports whether a pooled sandbox can run spec exactly as a fresh
// one would.
func (p *Pool) serves(spec *Spec) bool {
	arg0 := spec.Args[0]
	return spec.Limits.WithDefaults() == p.limits &&
		spec.Workspace == nil && len(spec.ExtraFiles) == 0 &&
		(spec.Dir == "" || spec.Dir == DefaultDir) &&
		p.m.root.Host() &&
		!strings.HasPrefix(arg0, "-") && !strings.Contains(arg0, "=")
}

// handover gives a waiting sandbox its command and collects the result.
func (p *Pool) handover(ctx context.Context, w *warm, cmd *Command) (*Result, error) {
	defer w.status.Close()
	w.r.started = time.Now() // the shell runs the script as it arrives
	_, err := w.script.WriteString(poolScript(cmd))
	w.script.Close()
	if err != nil {
		w.r.stdinW.Close()
		return nil, fmt.Errorf("hand command to sandbox %s: %w", w.sb.id, err)
	}
	w.r.stdin = cmd.Stdin // nil: collect closes stdin at once
	res, err := w.sb.collect(ctx, cmd, w.r)
	// Every writer of the status pipe is gone once the sandbox's init
	// has exited, so this read cannot block.
	status, _ := io.ReadAll(w.status)
	switch strings.TrimSpace(string(status)) {
	case "notfound":
		return nil, fmt.Errorf("%w: %s", ErrNotFound, cmd.Args[0])
	case "notexec":
		return nil, fmt.Errorf("%w: %s", ErrNotExecutable, cmd.Args[0])
	}
	return res, err
}

// poolScript is what the waiting shell runs: find the command the way a
// fresh sandbox's init would (in the command's PATH, a regular executable
// file), report it on fd 4 if it cannot run, else exec env with exactly the
// command's environment, and fds 3 and 4 closed, to exec the command. Every
// test is a shell builtin: no process is forked.
func poolScript(cmd *Command) string {
	env := environ(cmd.Env)
	path := Path
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	name := shellQuote(cmd.Args[0])
	var b strings.Builder
	b.WriteString("exec 3<&-\n")
	if strings.Contains(cmd.Args[0], "/") {
		fmt.Fprintf(&b, "[ -e %s ] || { echo notfound >&4; exit 127; }\n", name)
		fmt.Fprintf(&b, "[ -f %s ] && [ -x %s ] || { echo notexec >&4; exit 126; }\n", name, name)
	} else {
		fmt.Fprintf(&b, "set -f; p=%s; f=; IFS=:\n", shellQuote(path))
		fmt.Fprintf(&b, "for d in $p; do [ -f \"${d:-.}\"/%s ] && [ -x \"${d:-.}\"/%s ] && { f=1; break; }; done\n", name, name)
		b.WriteString("[ -n \"$f\" ] || { echo notfound >&4; exit 127; }\n")
	}
	b.WriteString("exec 4>&- /usr/bin/env -i --")
	for _, kv := range env {
		b.WriteByte(' ')
		b.WriteString(shellQuote(kv))
	}
	for _, a := range cmd.Args {
		b.WriteByte(' ')
		b.WriteString(shellQuote(a))
	}
	b.WriteByte('\n')
	return b.String()
}

// shellQuote quotes s for the POSIX shell: single quotes keep every byte
// but the single quote itself, which is closed, escaped and reopened.
// Validate has already refused NUL bytes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Ready is how many sandboxes wait for a command now.
func (p *Pool) Ready() int { return len(p.ready) }

// Building is how many sandboxes are being started for the pool. Ready plus
// Building never exceeds the pool's size.
func (p *Pool) Building() int { return int(p.building.Load()) }

// Stats reports how many runs a pooled sandbox served (hits) and how many
// eligible runs found the pool empty (misses).
func (p *Pool) Stats() (hits, misses int64) { return p.hits.Load(), p.misses.Load() }

// Close stops refilling, destroys the sandboxes still waiting and waits for
// background teardowns. Runs still in progress finish normally.
func (p *Pool) Close() error {
	p.once.Do(func() { close(p.stop) })
	// The refill loop stops at once, or after the sandbox it is
	// building; background teardowns finish.
	p.wg.Wait()
	p.m.WaitTeardowns()
	for {
		select {
		case w := <-p.ready:
			w.destroy()
		default:
			return nil
		}
	}
}
