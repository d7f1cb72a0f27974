package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/fdpass"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
)

// ErrDown: no worker serves runs now (it died and is being restarted), and
// the run was not handed to one: no worker had all of it. It matches
// box.ErrUnavailable, which front ends answer with "try again".
var ErrDown error = downError{}

type downError struct{}

func (downError) Error() string        { return "jaild worker is not running" }
func (downError) Is(target error) bool { return target == box.ErrUnavailable }

// ErrLost: the worker died while it held the run, or the workspace the run
// named. What became of the command is unknown, so it is no ErrDown: "try
// again" could run it twice.
var ErrLost = errors.New("jaild worker died")

// Config says how a front end starts its worker.
type Config struct {
	// Open opens the worker's binary and returns its path (argv[0]) and
	// a descriptor to execute it by, which Start closes. It is called at
	// every start, restarts too, so that its checks apply each time.
	Open func() (path string, fd int, err error)
	// Args follow argv[0]: the worker command and its flags.
	Args []string
	// Env is the worker's environment; nil means the front end's.
	Env []string
	// Stderr receives the worker's log; nil means os.Stderr.
	Stderr *os.File
	// ReadyTimeout bounds the wait for a worker to build its Manager;
	// zero means two minutes.
	ReadyTimeout time.Duration
	// Logger receives the front end's messages about the worker (exits,
	// restarts); nil discards them.
	Logger *slog.Logger
	// PrivateMounts starts the worker in a mount namespace of its own
	// (CLONE_NEWNS), a copy of the front end's, where the system allows
	// it, and in the front end's otherwise: its Args ask its Manager to
	// use one (jail.Config.PrivateMounts), which it does only if it finds
	// one.
	PrivateMounts bool
}

// Client is the front end's handle on its worker: a Runner whose runs are
// the worker's. It restarts a worker that dies. It is safe for concurrent
// use.
type Client struct {
	cfg  Config
	log  *slog.Logger
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the supervisor has returned

	mu     sync.Mutex
	cur    *proc // nil while no worker runs
	down   error // why cur is nil
	closed bool
	// up is closed while cur serves, and when the client closes; while
	// no worker runs it is open, and is closed when the next one is up.
	up chan struct{}
	// exits counts workers that exited while the client was open.
	exits uint64
}

// Exits is how many times a worker exited while the client was open (each
// time it is restarted), for metrics.
func (c *Client) Exits() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exits
}

// proc is one worker process.
type proc struct {
	cmd    *exec.Cmd
	ctl    *net.UnixConn
	exited chan struct{} // closed once the process was reaped
	err    error         // its exit status, set before exited is closed
}

// Start starts a worker and waits until it is ready to run sandboxes. The
// worker's own error, if it cannot build its Manager (not root, no user
// namespaces, an untrusted state dir...), is returned with its identity.
func Start(cfg Config) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	p, err := start(&cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{}), cur: p, up: make(chan struct{})}
	close(c.up)
	go c.supervise(p)
	return c, nil
}

// start starts one worker process and waits for its ready message.
func start(cfg *Config) (_ *proc, retErr error) {
	ctl, remote, err := controlPair()
	if err != nil {
		return nil, err
	}
	defer remote.Close()
	defer func() {
		if retErr != nil {
			ctl.Close()
		}
	}()
	path, fd, err := openWorker(cfg)
	if err != nil {
		return nil, err
	}
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	newCmd := func(private bool) *exec.Cmd {
		cmd := &exec.Cmd{
			Path:       fmt.Sprintf("/proc/self/fd/%d", fd),
			Args:       append([]string{path}, cfg.Args...),
			Env:        cfg.Env,
			Stdout:     stderr, // nothing of the worker may reach a protocol on stdout
			Stderr:     stderr,
			ExtraFiles: []*os.File{remote}, // ControlFD
			// A terminal's ^C goes to the front end's process group
			// alone: the front end shuts the worker down in order.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		}
		if private {
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
		}
		return cmd
	}
	cmd := newCmd(cfg.PrivateMounts)
	err = cmd.Start()
	if err != nil && cfg.PrivateMounts && errors.Is(err, syscall.EPERM) {
		// A seccomp profile or an LSM may forbid the namespace: the
		// worker, finding its parent's, does without (see
		// PrivateMounts).
		cfg.Logger.Warn("worker started in the front end's mount namespace", "err", err)
		cmd = newCmd(false)
		err = cmd.Start()
	}
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("start jaild worker %s: %w", path, err)
	}
	p := &proc{cmd: cmd, ctl: ctl, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	defer func() {
		if retErr != nil {
			ctl.Close() // EOF: a worker that got this far exits
			select {
			case <-p.exited:
			case <-time.After(cfg.ReadyTimeout):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
	}()
	if err := p.waitReady(path, cfg.ReadyTimeout); err != nil {
		return nil, err
	}
	return p, nil
}

// controlPair makes the control connection: ctl, the front end's end, and
// remote, the file the worker gets as ControlFD.
func controlPair() (ctl *net.UnixConn, remote *os.File, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	local, remote := os.NewFile(uintptr(pair[0]), "control"), os.NewFile(uintptr(pair[1]), "control")
	nc, err := net.FileConn(local)
	local.Close()
	if err != nil {
		remote.Close()
		return nil, nil, fmt.Errorf("control connection: %w", err)
	}
	return nc.(*net.UnixConn), remote, nil
}

// openWorker opens the worker's binary with cfg.Open and returns its path
// and a descriptor to execute it by, which the caller closes.
func openWorker(cfg *Config) (path string, fd int, err error) {
	path, fd, err = cfg.Open()
	if err != nil {
		return "", -1, err
	}
	// The child executes /proc/self/fd/N before exec closes N; N must
	// not be one of the descriptors the child's stdio and ExtraFiles are
	// moved to first.
	if fd < 10 {
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		unix.Close(fd)
		if err != nil {
			return "", -1, fmt.Errorf("dup %s descriptor: %w", path, err)
		}
		fd = high
	}
	return path, fd, nil
}

// waitReady waits up to timeout for the ready message of p, the worker
// started from path, and returns the worker's error if it could not
// build its Manager.
func (p *proc) waitReady(path string, timeout time.Duration) error {
	_ = p.ctl.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 64<<10)
	n, err := p.ctl.Read(buf)
	_ = p.ctl.SetReadDeadline(time.Time{})
	if err != nil || n < 4 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("jaild worker %s not ready after %v", path, timeout)
		}
		<-p.exited
		return fmt.Errorf("jaild worker %s exited before it was ready: %v", path, p.err)
	}
	var r ready
	if size := binary.BigEndian.Uint32(buf); int(size) != n-4 {
		return fmt.Errorf("jaild worker %s: bad ready message", path)
	}
	if err := json.Unmarshal(buf[4:n], &r); err != nil {
		return fmt.Errorf("jaild worker %s: bad ready message: %w", path, err)
	}
	if r.Err != nil {
		return r.Err.decode()
	}
	return nil
}

// supervise restarts the worker when it dies, with a growing pause between
// failed starts.
func (c *Client) supervise(p *proc) {
	defer close(c.done)
	const maxPause = 10 * time.Second
	pause := 100 * time.Millisecond
	for {
		select {
		case <-p.exited:
		case <-c.stop:
			return
		}
		started := time.Now()
		c.mu.Lock()
		c.cur, c.down = nil, fmt.Errorf("%w: it exited (%v) and is being restarted", ErrDown, p.err)
		c.exits++
		if !c.closed {
			c.up = make(chan struct{})
		}
		c.mu.Unlock()
		p.ctl.Close()
		c.log.Error("jaild worker exited; restarting it", "pid", p.cmd.Process.Pid, "status", fmt.Sprint(p.err))
		for {
			select {
			case <-time.After(pause):
			case <-c.stop:
				return
			}
			np, err := start(&c.cfg)
			if err == nil {
				c.mu.Lock()
				if c.closed {
					c.mu.Unlock()
					np.ctl.Close()
					<-np.exited
					return
				}
				c.cur = np
				close(c.up)
				c.mu.Unlock()
				c.log.Info("jaild worker restarted", "pid", np.cmd.Process.Pid)
				p = np
				break
			}
			c.mu.Lock()
			c.down = fmt.Errorf("%w: restarting it failed: %w", ErrDown, err)
			c.mu.Unlock()
			c.log.Error("restarting jaild worker", "err", err, "retry_in", pause)
			pause = min(2*pause, maxPause)
		}
		if time.Since(started) > time.Minute {
			pause = 100 * time.Millisecond
		}
	}
}

// Close stops the worker: it cancels the runs still in flight, closes its
// pool and Manager, which kills and removes every sandbox, and exits. Close
// returns when it has, with its error if it failed to clean up.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	p := c.cur
	if p == nil {
		close(c.up) // no worker will come: a waiter finds out Run says so
	}
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	if p == nil {
		return nil
	}
	p.ctl.Close()
	<-p.exited
	if p.err != nil {
		return fmt.Errorf("jaild worker: %w", p.err)
	}
	return nil
}

// Up returns a channel that is closed once a worker serves runs: at once
// while one does, else when the worker being restarted is (or when the
// client closes). A run that failed with ErrDown was handed to no worker:
// a caller may wait on Up and try it again, as the daemon's admission does
// for runs it has queued.
func (c *Client) Up() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

func (c *Client) current() (*proc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, box.ErrClosed
	case c.cur == nil:
		return nil, c.down
	}
	return c.cur, nil
}

// Run runs spec in the worker, with the contract of jail.Manager.Run: the
// spec's Stdout and Stderr receive the output live, and when ctx ends the
// sandbox is killed and the partial result comes back with ctx's error.
func (c *Client) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	p, err := c.current()
	if err != nil {
		return nil, err
	}
	return runOn(ctx, p, spec, "")
}

// runOn runs spec on p, on the workspace wsID if it is not empty.
func runOn(ctx context.Context, p *proc, spec *jail.Spec, wsID string) (*box.Result, error) {
	res, err := p.run(ctx, spec, wsID)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The worker's run was cancelled because ctx ended; say why.
		err = ctx.Err()
	}
	return res, err
}

// run sends one run to the worker and collects its answer: a socket of
// its own for the run, the run's descriptors over the control socket, the
// spec over the run's socket, then the answer (see receive).
func (p *proc) run(ctx context.Context, spec *jail.Spec, wsID string) (*box.Result, error) {
	if len(spec.ExtraFiles) > maxExtra {
		return nil, &box.InvalidError{Field: "extra files", Reason: fmt.Sprintf("%d: at most %d through the worker", len(spec.ExtraFiles), maxExtra)}
	}
	conn, peer, err := runSocket()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	fs := runFiles{send: []int{peer}}
	// The tees end when the worker has closed its ends of their pipes and
	// fs.close this side's (deferred below, so run before this).
	defer fs.tees.Wait()
	defer fs.close()
	if err := fs.open(spec); err != nil {
		return nil, err
	}
	ws := wireSpec{
		Limits: spec.Limits, Args: spec.Args, Env: spec.Env, Dir: spec.Dir,
		Timeout: spec.Timeout, MaxOutput: spec.MaxOutput, Workspace: wsID, Egress: spec.Egress != nil,
	}
	specFrame, err := frame(ws)
	if err != nil {
		return nil, p.notSent("send the spec", err)
	}
	// The spec goes first, as far as the socket's buffer takes it without
	// waiting, so that the worker finds it there as it receives the
	// socket rather than waking again for it: one wake-up less on every
	// run's way (docs/performance.md). What the buffer did not take
	// follows the socket, as the worker reads.
	rest, err := writeNow(conn, specFrame)
	if err != nil {
		return nil, p.notSent("send the spec", err)
	}
	if _, _, err := p.ctl.WriteMsgUnix(fs.message(spec), unix.UnixRights(fs.send...), nil); err != nil {
		return nil, p.notSent("send the run", err)
	}
	fs.closeSent()
	if len(rest) > 0 {
		if _, err := conn.Write(rest); err != nil {
			return nil, p.notSent("send the spec", err)
		}
	}
	if fs.stdinW != nil {
		go func() {
			_, _ = io.Copy(fs.stdinW, spec.Stdin)
			fs.stdinW.Close()
		}()
	}
	// Half-closing the socket cancels the run in the worker, which still
	// answers.
	defer context.AfterFunc(ctx, func() { _ = conn.CloseWrite() })()
	return p.receive(ctx, conn, spec)
}

// writeNow writes what of b conn's send buffer takes without waiting, and
// returns the rest.
func writeNow(conn *net.UnixConn, b []byte) (rest []byte, err error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return b, err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n, err := unix.Write(int(fd), b)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if err != unix.EAGAIN {
					werr = err
				}
				break
			}
			b = b[n:]
		}
		return true // never wait: the rest goes after the socket
	})
	if err == nil {
		err = werr
	}
	return b, err
}

// runSocket returns this side of a new run's socket and the descriptor of
// the worker's side, to be sent.
func runSocket() (*net.UnixConn, int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("run socketpair: %w", err)
	}
	local := os.NewFile(uintptr(pair[0]), "run")
	nc, err := net.FileConn(local)
	local.Close()
	if err != nil {
		unix.Close(pair[1])
		return nil, -1, fmt.Errorf("run socket: %w", err)
	}
	return nc.(*net.UnixConn), pair[1], nil
}

// runFiles are the descriptors one run hands to the worker: the worker's
// side of the run's socket, then stdin, stdout, stderr (those the spec
// has) and the extra files, in that order, as flags says.
type runFiles struct {
	send  []int
	flags byte
	// sent are this side's references to descriptors made for the run
	// (the peer socket is send[0]): closed once sent, since the message
	// holds its own until the worker receives them, or at close.
	sent []io.Closer
	// stdinW is the write end of the stdin pipe of a Stdin that is no
	// *os.File. It is closed when the run returns, abandoning a Read
	// still blocked, as os/exec does.
	stdinW *os.File
	tees   sync.WaitGroup
}

// open makes the pipes of spec's streams and lists the descriptors to send.
// The tees of stdout and stderr run until the worker closes its write ends.
func (fs *runFiles) open(spec *jail.Spec) error {
	switch in := spec.Stdin.(type) {
	case nil:
	case *os.File:
		fs.flags |= hasStdin
		fs.send = append(fs.send, int(in.Fd()))
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("create stdin pipe: %w", err)
		}
		fs.flags |= hasStdin
		fs.send = append(fs.send, int(r.Fd()))
		fs.sent = append(fs.sent, r)
		fs.stdinW = w
	}
	for _, t := range []struct {
		flag byte
		dst  io.Writer
	}{{hasStdout, spec.Stdout}, {hasStderr, spec.Stderr}} {
		if t.dst == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("create output pipe: %w", err)
		}
		fs.flags |= t.flag
		fs.send = append(fs.send, int(w.Fd()))
		fs.sent = append(fs.sent, w)
		fs.tees.Add(1)
		go func() {
			defer fs.tees.Done()
			tee(t.dst, r)
		}()
	}
	// The caller keeps its own extra files: the message holds references
	// of its own until the worker has them.
	for _, f := range spec.ExtraFiles {
		fs.send = append(fs.send, int(f.Fd()))
	}
	return nil
}

// message is the control message's payload: the flags, and the number of
// extra files if there are any.
func (fs *runFiles) message(spec *jail.Spec) []byte {
	if n := len(spec.ExtraFiles); n > 0 {
		return []byte{fs.flags | hasExtra, byte(n)}
	}
	return []byte{fs.flags}
}

// closeSent closes this side's references to what was sent.
func (fs *runFiles) closeSent() {
	if fs.send[0] >= 0 {
		unix.Close(fs.send[0])
		fs.send[0] = -1
	}
	for _, f := range fs.sent {
		f.Close()
	}
	fs.sent = nil
}

// close closes what the run still holds: what was never sent, and the
// stdin pipe's write end.
func (fs *runFiles) close() {
	fs.closeSent()
	if fs.stdinW != nil {
		fs.stdinW.Close()
	}
}

// receive reads the worker's answer to a run sent on conn: the proxy
// listener first for a run with egress (unless the run failed before its
// sandbox was built), then the answer frame, then the output it announces.
func (p *proc) receive(ctx context.Context, conn *net.UnixConn, spec *jail.Spec) (*box.Result, error) {
	var in io.Reader = conn
	var egress *egressServer
	if spec.Egress != nil {
		var err error
		in, egress, err = receiveListener(ctx, conn, spec.Egress)
		if err != nil {
			return nil, p.gone("receive the proxy listener", err)
		}
		defer egress.stop() // if the answer never comes
	}
	var a answer
	if err := readFrame(in, &a); err != nil {
		return nil, p.gone("read the result", err)
	}
	if egress != nil {
		// The worker answers once the sandbox is gone: nothing is left
		// to proxy for.
		usage := egress.stop()
		if a.Result != nil {
			a.Result.Egress = usage
		}
	}
	maxOut := spec.MaxOutput
	if maxOut == 0 {
		maxOut = box.DefaultMaxOutput
	}
	if a.Result == nil && (a.StdoutLen > 0 || a.StderrLen > 0) || a.StdoutLen < 0 || a.StderrLen < 0 || a.StdoutLen > maxOut || a.StderrLen > maxOut {
		return nil, fmt.Errorf("jaild worker answered %d and %d bytes of output for a run that keeps %d", a.StdoutLen, a.StderrLen, maxOut)
	}
	if a.Result != nil {
		var err error
		if a.Result.Stdout, err = readString(in, a.StdoutLen); err == nil {
			a.Result.Stderr, err = readString(in, a.StderrLen)
		}
		if err != nil {
			return nil, p.gone("read the output", err)
		}
	}
	return a.Result, a.Err.decode()
}

// gone is the error of a run whose worker stopped answering while doing
// what.
func (p *proc) gone(what string, err error) error {
	select {
	case <-p.exited:
		return fmt.Errorf("%w: it exited (%v) before it could %s", ErrLost, p.err, what)
	case <-time.After(100 * time.Millisecond):
		return fmt.Errorf("jaild worker: %s: %w", what, err)
	}
}

// notSent is the error of a run that could not be handed to its worker
// while doing what: the control message was refused (SOCK_SEQPACKET delivers
// a message whole or not at all), or the spec frame was not all written, and
// the worker starts a run only once it has read the whole frame. Nothing of
// the run started; if the worker is dead, the run may go to the next one.
func (p *proc) notSent(what string, err error) error {
	select {
	case <-p.exited:
		return fmt.Errorf("%w: it exited (%v) before it could %s", ErrDown, p.err, what)
	case <-time.After(100 * time.Millisecond):
		return fmt.Errorf("jaild worker: %s: %w", what, err)
	}
}

// readString reads exactly n bytes into a string, without a copy.
func readString(r io.Reader, n int64) (string, error) {
	if n == 0 {
		return "", nil
	}
	var b strings.Builder
	b.Grow(int(n))
	if _, err := io.CopyN(&b, r, n); err != nil {
		return "", err
	}
	return b.String(), nil
}

// tee copies a live stream from r to dst until EOF, then closes r. A dst
// that fails is no longer written to, and the stream is still drained, so
// that the command never blocks on it (as jail does with a failing tee).
func tee(dst io.Writer, r *os.File) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				dst = nil
			}
		}
		if err != nil {
			return
		}
	}
}

// egressServer is the front end's proxy of one run.
type egressServer struct {
	cancel context.CancelFunc
	done   chan struct{}
	usage  box.EgressUsage
	once   sync.Once
}

// stop ends the proxy and returns its counters; safe to call twice.
func (e *egressServer) stop() *box.EgressUsage {
	if e == nil {
		return nil
	}
	e.once.Do(func() {
		e.cancel()
		<-e.done
	})
	return &e.usage
}

// receiveListener reads what comes first on a run with egress: the proxy
// listener, which it starts serving with eg, or else the answer, which the
// returned reader gives back whole.
func receiveListener(ctx context.Context, conn *net.UnixConn, eg *jail.Egress) (io.Reader, *egressServer, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, io.ErrUnexpectedEOF
	}
	fds, perr := fdpass.Parse(oob[:oobn])
	if b[0] != egressMark {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return io.MultiReader(bytes.NewReader(b[:1]), conn), nil, nil
	}
	if perr == nil && (len(fds) != 1 || flags&unix.MSG_CTRUNC != 0) {
		perr = fmt.Errorf("proxy listener message with %d descriptors", len(fds))
	}
	if perr != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, perr
	}
	f := os.NewFile(uintptr(fds[0]), "egress")
	ln, err := net.FileListener(f) // a close-on-exec duplicate
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("proxy listener: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &egressServer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.usage = eg.Serve(sctx, ln)
		ln.Close()
	}()
	return conn, e, nil
}
