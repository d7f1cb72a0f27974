package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/fdpass"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
)

// Runner runs one spec in a fresh sandbox and tears it down: *jail.Manager
// or *jail.Pool in the worker, *Client in the front end.
type Runner interface {
	Run(ctx context.Context, spec *jail.Spec) (*box.Result, error)
}

// ControlFD is the worker's descriptor of the control connection.
const ControlFD = 3

// Control returns the worker's control connection, inherited as
// ControlFD, as a close-on-exec connection: the processes the worker starts
// (sandbox inits, its Manager's watchdog) must not hold it, or the front
// end would not see EOF when the worker dies, nor the worker when the front
// end does.
func Control() (*net.UnixConn, error) {
	f := os.NewFile(ControlFD, "control")
	if f == nil {
		return nil, errors.New("no control connection on fd 3: jaild worker is started by jaild serve and jaild mcp")
	}
	defer f.Close()
	c, err := net.FileConn(f) // a close-on-exec duplicate
	if err != nil {
		return nil, fmt.Errorf("control connection on fd %d: %w", ControlFD, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("control connection on fd %d is not a unix socket", ControlFD)
	}
	return uc, nil
}

// Ready tells the front end on ctl that the worker serves runs (err nil) or
// why it cannot (then it exits).
func Ready(ctl *net.UnixConn, err error) error {
	return writeFrame(ctl, ready{Err: encodeError(err)})
}

// Workspace is a workspace the worker holds for the front end: a
// *jail.Workspace.
type Workspace interface {
	ID() string
	Dir() string
	Size() int64
	HostIDs() (uid, gid int)
	Run(ctx context.Context, spec *jail.Spec) (*box.Result, error)
	Close() error
	// TakeProxyListener is jail.Workspace.TakeProxyListener.
	TakeProxyListener() net.Listener
}

// Workspaces makes workspaces, with a proxy listener if proxy is set and a
// sandbox with limits prestart kept started for the next run if prestart is
// not nil: with a *jail.Manager m, m.NewWorkspace (with jail.WithProxy and
// jail.WithPrestart), with the nil check that converting a nil
// *jail.Workspace needs.
type Workspaces func(size int64, proxy bool, prestart *box.Limits) (Workspace, error)

// ErrNoWorkspace: a run or a close names a workspace the worker does not
// hold (it was closed, or another worker made it), or the worker makes none.
var ErrNoWorkspace = errors.New("jaild worker: no such workspace")

// Serve runs with base every run the front end sends on ctl, each in a
// goroutine of its own, and makes workspaces with ws (nil: none), until
// ctl reaches EOF (the front end closed it or died) or ctx ends. It then
// cancels the runs in flight, which kills their sandboxes, and returns
// once each has answered, after closing the workspaces it still holds.
func Serve(ctx context.Context, ctl *net.UnixConn, base Runner, ws Workspaces, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &served{base: base, make: ws, held: map[string]Workspace{}, log: log}
	ctx, cancel := context.WithCancel(ctx)
	var runs sync.WaitGroup
	defer func() {
		cancel()
		runs.Wait()
		w.closeAll()
	}()
	stop := context.AfterFunc(ctx, func() { ctl.Close() })
	defer stop()
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4*(4+maxExtra)))
	for {
		n, oobn, flags, _, err := ctl.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read control connection: %w", err)
		}
		fds, perr := fdpass.Parse(oob[:oobn])
		if perr == nil && flags&unix.MSG_CTRUNC != 0 {
			perr = errors.New("descriptors truncated")
		}
		var want int
		if perr == nil {
			want, perr = descriptors(buf[:n])
		}
		if perr == nil && len(fds) != want {
			perr = fmt.Errorf("message of %d bytes with %d descriptors, want %d", n, len(fds), want)
		}
		if perr != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			log.Error("bad message from the front end", "err", perr)
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		runs.Add(1)
		go func() {
			defer runs.Done()
			if msg[0] == opWorkspace {
				if err := w.serveWorkspace(fds[0]); err != nil {
					log.Warn("answering a workspace operation", "err", err)
				}
				return
			}
			if err := w.serveRun(ctx, msg, fds); err != nil {
				log.Warn("answering a run", "err", err)
			}
		}()
	}
}

// descriptors checks a control message and says how many descriptors it
// must carry.
func descriptors(msg []byte) (int, error) {
	f := msg[0]
	switch {
	case f == opWorkspace && len(msg) == 1:
		return 1, nil
	case f&^(hasStdin|hasStdout|hasStderr|hasExtra) != 0:
		return 0, fmt.Errorf("unknown flags %#x", f)
	case f&hasExtra == 0 && len(msg) == 1:
		return 1 + bits.OnesCount8(f), nil
	case f&hasExtra != 0 && len(msg) == 2 && msg[1] >= 1 && msg[1] <= maxExtra:
		return 1 + bits.OnesCount8(f&^hasExtra) + int(msg[1]), nil
	}
	return 0, fmt.Errorf("run message of %d bytes with flags %#x", len(msg), f)
}

// served is what Serve keeps: the workspaces it holds, by id.
type served struct {
	base Runner
	make Workspaces
	log  *slog.Logger

	mu   sync.Mutex
	held map[string]Workspace
	done bool // closeAll ran: no more workspaces
}

func (w *served) workspace(id string) (Workspace, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws, ok := w.held[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoWorkspace, id)
	}
	return ws, nil
}

// serveWorkspace answers one workspace operation on the socket fd.
func (w *served) serveWorkspace(fd int) error {
	conn, err := fdConn(fd)
	if err != nil {
		return err
	}
	defer conn.Close()
	var req wsRequest
	if err := readFrame(conn, &req); err != nil {
		return fmt.Errorf("read workspace request: %w", err)
	}
	var (
		a     wsAnswer
		proxy net.Listener
	)
	switch req.Op {
	case "create":
		ws, err := w.create(req.Size, req.Proxy, req.Prestart)
		if err != nil {
			a.Err = encodeError(err)
			break
		}
		a.ID, a.Dir, a.Size = ws.ID(), ws.Dir(), ws.Size()
		a.UID, a.GID = ws.HostIDs()
		if req.Proxy {
			if proxy = ws.TakeProxyListener(); proxy == nil {
				w.mu.Lock()
				delete(w.held, ws.ID())
				w.mu.Unlock()
				a = wsAnswer{Err: encodeError(errors.Join(errors.New("the workspace has no proxy listener"), ws.Close()))}
			}
		}
	case "close":
		w.mu.Lock()
		ws, ok := w.held[req.ID]
		delete(w.held, req.ID)
		w.mu.Unlock()
		if !ok {
			a.Err = encodeError(fmt.Errorf("%w: %q", ErrNoWorkspace, req.ID))
			break
		}
		a.Err = encodeError(ws.Close())
	default:
		a.Err = encodeError(fmt.Errorf("unknown workspace operation %q", req.Op))
	}
	if err := writeFrame(conn, a); err != nil {
		if proxy != nil {
			proxy.Close()
		}
		return fmt.Errorf("answer workspace %s: %w", req.Op, err)
	}
	if proxy != nil {
		// After the answer, as a run's listener is (egressMark); the
		// front end's copy is the one that serves, the worker's goes.
		return passWorkspaceListener(conn, proxy)
	}
	return nil
}

// passWorkspaceListener sends a workspace's proxy listener to the front end
// after its create answer, and closes the worker's copy.
func passWorkspaceListener(conn *net.UnixConn, ln net.Listener) error {
	defer ln.Close()
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return fmt.Errorf("proxy listener of type %T", ln)
	}
	f, err := tl.File()
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	defer f.Close()
	if _, _, err := conn.WriteMsgUnix([]byte{egressMark}, unix.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("send the proxy listener: %w", err)
	}
	return nil
}

func (w *served) create(size int64, proxy bool, prestart *box.Limits) (Workspace, error) {
	if w.make == nil {
		return nil, fmt.Errorf("%w: this worker makes no workspaces", ErrNoWorkspace)
	}
	ws, err := w.make(size, proxy, prestart)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		_ = ws.Close()
		return nil, box.ErrClosed
	}
	w.held[ws.ID()] = ws
	return ws, nil
}

// closeAll closes every workspace still held, once no run is in flight.
func (w *served) closeAll() {
	w.mu.Lock()
	w.done = true
	held := w.held
	w.held = map[string]Workspace{}
	w.mu.Unlock()
	for id, ws := range held {
		if err := ws.Close(); err != nil {
			w.log.Warn("closing workspace", "id", id, "err", err)
		}
	}
}

func fdConn(fd int) (*net.UnixConn, error) {
	sock := os.NewFile(uintptr(fd), "run")
	nc, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return nil, fmt.Errorf("run socket: %w", err)
	}
	return nc.(*net.UnixConn), nil
}

// serveRun serves one run: fds are its socket and the descriptors flags
// announce, in order.
func (w *served) serveRun(ctx context.Context, msg []byte, fds []int) error {
	spec, files := receivedFiles(msg, fds)
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
	}
	defer closeFiles()
	conn, err := fdConn(fds[0])
	if err != nil {
		return err
	}
	defer conn.Close()

	var ws wireSpec
	if err := readFrame(conn, &ws); err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	spec.Limits = ws.Limits
	spec.Args, spec.Env, spec.Dir = ws.Args, ws.Env, ws.Dir
	spec.Timeout, spec.MaxOutput = ws.Timeout, ws.MaxOutput
	if ws.Egress {
		spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage {
			return passListener(ctx, conn, ln)
		}}
	}

	// The front end sends nothing more: EOF, or any byte, cancels the
	// run, as does the end of ctx.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var b [1]byte
		_, _ = conn.Read(b[:])
		cancel()
	}()
	var res *box.Result
	if ws.Workspace == "" {
		res, err = w.base.Run(runCtx, spec)
	} else if wsp, werr := w.workspace(ws.Workspace); werr != nil {
		err = werr
	} else {
		res, err = wsp.Run(runCtx, spec)
	}
	// The live streams end here, before the answer, so that the front
	// end has delivered all of them when it returns the result.
	closeFiles()
	err = sendAnswer(conn, res, err)
	conn.Close()
	<-watched
	return err
}

// receivedFiles turns the descriptors of a run's control message into a
// spec's stdin, stdout, stderr and extra files, as msg's flags say
// (fds[0] is the run's socket). files are all of them, for the caller to
// close once the command has ended.
func receivedFiles(msg []byte, fds []int) (spec *jail.Spec, files []*os.File) {
	flags := msg[0]
	spec = &jail.Spec{}
	i := 1
	for _, s := range []struct {
		flag byte
		name string
	}{{hasStdin, "stdin"}, {hasStdout, "stdout"}, {hasStderr, "stderr"}} {
		if flags&s.flag == 0 {
			continue
		}
		f := os.NewFile(uintptr(fds[i]), s.name)
		i++
		files = append(files, f)
		switch s.flag {
		case hasStdin:
			spec.Stdin = f
		case hasStdout:
			spec.Stdout = f
		case hasStderr:
			spec.Stderr = f
		}
	}
	if flags&hasExtra != 0 {
		for range int(msg[1]) {
			f := os.NewFile(uintptr(fds[i]), "extra")
			i++
			files = append(files, f)
			spec.ExtraFiles = append(spec.ExtraFiles, f)
		}
	}
	return spec, files
}

// sendAnswer writes a run's answer, its result without the output and
// the run's error, then the output bytes as they are, in one writev.
func sendAnswer(conn *net.UnixConn, res *box.Result, runErr error) error {
	a := answer{Err: encodeError(runErr)}
	var stdout, stderr string
	if res != nil {
		r := *res
		stdout, stderr = r.Stdout, r.Stderr
		r.Stdout, r.Stderr = "", ""
		a.Result, a.StdoutLen, a.StderrLen = &r, int64(len(stdout)), int64(len(stderr))
	}
	head, err := frame(a)
	if err == nil {
		bufs := net.Buffers{head}
		for _, out := range []string{stdout, stderr} {
			if out != "" {
				bufs = append(bufs, unsafe.Slice(unsafe.StringData(out), len(out)))
			}
		}
		_, err = bufs.WriteTo(conn)
	}
	if err != nil {
		return fmt.Errorf("send result: %w", err)
	}
	return nil
}

// passListener hands the proxy listener of a run with egress to the front
// end, which serves it and counts the run's usage, and holds the worker's
// copy until the sandbox is gone (ctx ends).
func passListener(ctx context.Context, conn *net.UnixConn, ln net.Listener) box.EgressUsage {
	defer ln.Close()
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return box.EgressUsage{}
	}
	f, err := tl.File() // a duplicate, closed once sent
	if err != nil {
		return box.EgressUsage{}
	}
	// A failure leaves the listener unserved: the sandbox's connections
	// wait in its backlog and fail when it ends, refused, not let out.
	_, _, _ = conn.WriteMsgUnix([]byte{egressMark}, unix.UnixRights(int(f.Fd())), nil)
	f.Close()
	<-ctx.Done()
	return box.EgressUsage{}
}
