package worker

import (
	"context"
	"errors"
	"fmt"
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
	Run(ctx context.Context, spec *jail.Spec) (*jail.Result, error)
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

// Serve runs with base every run the front end sends on ctl, each in a
// goroutine of its own, until ctl reaches EOF (the front end closed it or
// died) or ctx ends. It then cancels the runs in flight, which kills their
// sandboxes, and returns once each has answered.
func Serve(ctx context.Context, ctl *net.UnixConn, base Runner, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	var runs sync.WaitGroup
	defer func() {
		cancel()
		runs.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ctl.Close() })
	defer stop()
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := ctl.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read control connection: %w", err)
		}
		fds, perr := parseRights(oob[:oobn])
		if perr == nil && flags&unix.MSG_CTRUNC != 0 {
			perr = errors.New("descriptors truncated")
		}
		if perr == nil && (n != 1 || len(fds) != 1+bits.OnesCount8(buf[0]&(hasStdin|hasStdout|hasStderr))) {
			perr = fmt.Errorf("run message of %d bytes with %d descriptors", n, len(fds))
		}
		if perr != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			log.Error("bad message from the front end", "err", perr)
			continue
		}
		runs.Add(1)
		go func(flags byte) {
			defer runs.Done()
			if err := serveRun(ctx, flags, fds, base); err != nil {
				log.Warn("answering a run", "err", err)
			}
		}(buf[0])
	}
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// serveRun serves one run: fds are its socket and the descriptors flags
// announce, in order.
func serveRun(ctx context.Context, flags byte, fds []int, base Runner) error {
	var files []*os.File // the command's stdio, closed once it ends
	spec := &jail.Spec{}
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
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
	}
	defer closeFiles()
	sock := os.NewFile(uintptr(fds[0]), "run")
	nc, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return fmt.Errorf("run socket: %w", err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()

	var ws wireSpec
	if err := readFrame(conn, &ws); err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	spec.Limits = ws.Limits
	spec.Args, spec.Env, spec.Dir = ws.Args, ws.Env, ws.Dir
	spec.Timeout, spec.MaxOutput = ws.Timeout, ws.MaxOutput
	if ws.Egress {
		spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) jail.EgressUsage {
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
	res, err := base.Run(runCtx, spec)
	// The live streams end here, before the answer, so that the front
	// end has delivered all of them when it returns the result.
	closeFiles()
	a := answer{Err: encodeError(err)}
	var stdout, stderr string
	if res != nil {
		r := *res
		stdout, stderr = r.Stdout, r.Stderr
		r.Stdout, r.Stderr = "", ""
		a.Result, a.StdoutLen, a.StderrLen = &r, int64(len(stdout)), int64(len(stderr))
	}
	// One writev: the header, then the output bytes as they are.
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
	conn.Close()
	<-watched
	if err != nil {
		return fmt.Errorf("send result: %w", err)
	}
	return nil
}

// passListener hands the proxy listener of a run with egress to the front
// end, which serves it and counts the run's usage, and holds the worker's
// copy until the sandbox is gone (ctx ends).
func passListener(ctx context.Context, conn *net.UnixConn, ln net.Listener) jail.EgressUsage {
	defer ln.Close()
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return jail.EgressUsage{}
	}
	f, err := tl.File() // a duplicate, closed once sent
	if err != nil {
		return jail.EgressUsage{}
	}
	// A failure leaves the listener unserved: the sandbox's connections
	// wait in its backlog and fail when it ends, refused, not let out.
	_, _, _ = conn.WriteMsgUnix([]byte{egressMark}, unix.UnixRights(int(f.Fd())), nil)
	f.Close()
	<-ctx.Done()
	return jail.EgressUsage{}
}
