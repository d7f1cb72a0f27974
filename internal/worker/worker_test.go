package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// fake is a Runner that acts by the command's name.
type fake struct{}

func (fake) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	switch spec.Args[0] {
	case "echo": // stdin to the live stdout, the kept stdout and stderr
		var in []byte
		if spec.Stdin != nil {
			in, _ = io.ReadAll(spec.Stdin)
		}
		if spec.Stdout != nil {
			spec.Stdout.Write(in)
		}
		if spec.Stderr != nil {
			fmt.Fprint(spec.Stderr, strings.Join(spec.Args, " "))
		}
		return &box.Result{ID: "x", ExitCode: 7, Stdout: string(in), Stderr: strings.Join(spec.Env, ","),
			StdoutBytes: int64(len(in)), Duration: time.Second, Limits: spec.Limits}, nil
	case "block": // until cancelled, after live output
		fmt.Fprint(spec.Stdout, "started\n")
		<-ctx.Done()
		return &box.Result{Canceled: true, ExitCode: -1, Signal: "SIGKILL", Stdout: "partial"}, ctx.Err()
	case "egress": // as the jail does: a listener served by spec.Egress
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		sctx, cancel := context.WithCancel(context.Background())
		done := make(chan box.EgressUsage, 1)
		go func() { done <- spec.Egress.Serve(sctx, ln) }()
		c, err := net.Dial("tcp", ln.Addr().String())
		var line []byte
		if err == nil {
			line, _ = io.ReadAll(c)
			c.Close()
		}
		cancel()
		u := <-done
		return &box.Result{Stdout: string(line), Egress: &u}, err
	case "notfound":
		return nil, fmt.Errorf("%w: %s", box.ErrCommandNotFound, spec.Args[0])
	case "closed":
		return nil, box.ErrClosed
	case "invalid":
		return nil, &box.InvalidError{Field: "memory", Reason: "too much"}
	case "wrapped-invalid":
		return nil, fmt.Errorf("check: %w", &box.InvalidError{Field: "cwd", Reason: "outside"})
	case "untrusted":
		return nil, fmt.Errorf("%w: /run/x is writable by uid 5", box.ErrUntrusted)
	case "pids-budget":
		return nil, box.ErrPidsBudget
	case "other":
		return nil, errors.New("something else")
	}
	return nil, errors.New("unknown fake command")
}

// pair serves base on one end of a control socketpair and returns a proc
// on the other end, as Start would after the ready message.
func pair(t *testing.T, base Runner) *proc {
	t.Helper()
	return pairWith(t, base, nil)
}

// pairWith is pair with workspaces made by ws.
func pairWith(t *testing.T, base Runner, ws Workspaces) *proc {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "control")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	front, back := conn(fds[0]), conn(fds[1])
	served := make(chan error, 1)
	go func() { served <- Serve(context.Background(), back, base, ws, nil) }()
	t.Cleanup(func() {
		front.Close() // EOF: Serve returns
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		back.Close()
	})
	return &proc{ctl: front, exited: make(chan struct{})}
}

// lockedBuffer is a live stream's destination.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRunCrossesTheWire(t *testing.T) {
	p := pair(t, fake{})
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, beyond any socket buffer
	var out, errs lockedBuffer
	spec := &jail.Spec{
		Limits: box.Limits{Memory: 64 << 20},
		Command: box.Command{
			Args: []string{"echo", "a b"}, Env: []string{"K=V", "L=W"},
			Stdin: strings.NewReader(big), Stdout: &out, Stderr: &errs, MaxOutput: 2 << 20,
		},
	}
	res, err := p.run(context.Background(), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != big || res.Stderr != "K=V,L=W" || res.ExitCode != 7 || res.ID != "x" ||
		res.Duration != time.Second || res.Limits.Memory != 64<<20 || res.StdoutBytes != int64(len(big)) {
		t.Errorf("result: %+v", res)
	}
	// The live streams are complete when Run returns.
	if out.String() != big || errs.String() != "echo a b" {
		t.Errorf("live stdout %d bytes, want %d; live stderr %q", len(out.String()), len(big), errs.String())
	}
	// An *os.File stdin is handed over as it is.
	f, err := os.Open("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, _ := os.ReadFile("/proc/self/cmdline")
	res, err = p.run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"echo"}, Stdin: f}}, "")
	if err != nil || res.Stdout != string(want) {
		t.Errorf("file stdin: %v, %q", err, res.Stdout)
	}
}

// TestLargeSpecCrossesTheWire sends specs on both sides of the run socket's
// buffer: a small one goes before the socket, a 2 MiB one (its env) only
// partly, the rest after the worker has the socket. Each arrives whole.
func TestLargeSpecCrossesTheWire(t *testing.T) {
	p := pair(t, fake{})
	for _, size := range []int{10, 200 << 10, 2 << 20} {
		env := []string{"A=" + strings.Repeat("x", size), "B=y"}
		spec := &jail.Spec{Command: box.Command{Args: []string{"echo"}, Env: env, MaxOutput: 4 << 20}}
		res, err := p.run(context.Background(), spec, "")
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if res.Stderr != strings.Join(env, ",") {
			t.Errorf("%d bytes: the worker saw an env of %d bytes, want %d", size, len(res.Stderr), len(strings.Join(env, ",")))
		}
	}
}

func TestErrorsKeepTheirIdentity(t *testing.T) {
	p := pair(t, fake{})
	var invalid *box.InvalidError
	tests := []struct {
		name  string
		check func(error) bool
		msg   string
	}{
		{"notfound", func(err error) bool { return errors.Is(err, box.ErrCommandNotFound) }, "jail: command not found: notfound"},
		{"closed", func(err error) bool { return err == box.ErrClosed }, "jail: closed"},
		{"invalid", func(err error) bool {
			return errors.As(err, &invalid) && invalid.Field == "memory" && invalid.Reason == "too much"
		}, "invalid memory: too much"},
		{"wrapped-invalid", func(err error) bool { return errors.As(err, &invalid) && invalid.Field == "cwd" }, "check: invalid cwd: outside"},
		{"untrusted", func(err error) bool { return errors.Is(err, box.ErrUntrusted) }, "jail: directory not safe from other users: /run/x is writable by uid 5"},
		{"pids-budget", func(err error) bool { return errors.Is(err, box.ErrPidsBudget) }, box.ErrPidsBudget.Error()},
		{"other", func(err error) bool { return err != nil && !errors.Is(err, box.ErrCommandNotFound) }, "something else"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{tt.name}}}, "")
			if res != nil || !tt.check(err) || err.Error() != tt.msg {
				t.Errorf("got %v, %v (%T); want %q with its identity", res, err, err, tt.msg)
			}
		})
	}
}

func TestCancelKillsTheRun(t *testing.T) {
	p := pair(t, fake{})
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		// Cancelled once the run has started.
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		// Ends by itself: the client reports the caller's reason, not
		// the worker's cancellation.
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			started := make(chan struct{})
			out := writerFunc(func(b []byte) (int, error) {
				if string(b) == "started\n" {
					close(started)
				}
				return len(b), nil
			})
			type ret struct {
				res *box.Result
				err error
			}
			done := make(chan ret, 1)
			c := &Client{cur: p}
			go func() {
				res, err := c.Run(ctx, &jail.Spec{Command: box.Command{Args: []string{"block"}, Stdout: out}})
				done <- ret{res, err}
			}()
			<-started
			if tt.want == context.Canceled {
				cancel()
			}
			r := <-done
			if r.res == nil || !r.res.Canceled || r.res.Stdout != "partial" || r.err != tt.want {
				t.Errorf("got %+v, %v; want the partial result and %v", r.res, r.err, tt.want)
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestServeEndsRunsAtEOF: when the front end goes away, the worker cancels
// every run in flight and Serve returns once they have ended.
func TestServeEndsRunsAtEOF(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	files := []*os.File{os.NewFile(uintptr(fds[0]), "front"), os.NewFile(uintptr(fds[1]), "back")}
	var conns []*net.UnixConn
	for _, f := range files {
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c.(*net.UnixConn))
	}
	front, back := conns[0], conns[1]
	defer back.Close()
	ended := make(chan error, 1)
	base := runnerFunc(func(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
		fmt.Fprint(spec.Stdout, "started\n")
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	served := make(chan error, 1)
	go func() { served <- Serve(context.Background(), back, base, nil, nil) }()
	p := &proc{ctl: front, exited: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		_, _ = p.run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"x"}, Stdout: writerFunc(func(b []byte) (int, error) {
			close(started)
			return len(b), nil
		})}}, "")
	}()
	<-started
	front.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("run ended with %v, want it cancelled", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

type runnerFunc func(context.Context, *jail.Spec) (*box.Result, error)

func (f runnerFunc) Run(ctx context.Context, s *jail.Spec) (*box.Result, error) { return f(ctx, s) }

// TestEgressListenerCrossesTheWire: the worker hands a run's proxy listener
// to the front end, whose Serve answers the sandbox's connections and whose
// counters are the result's.
func TestEgressListenerCrossesTheWire(t *testing.T) {
	p := pair(t, fake{})
	var served sync.WaitGroup
	serve := func(ctx context.Context, ln net.Listener) box.EgressUsage {
		served.Add(1)
		defer served.Done()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		n := int64(0)
		for {
			c, err := ln.Accept()
			if err != nil {
				return box.EgressUsage{Connections: n, BytesIn: 42}
			}
			n++
			fmt.Fprintf(c, "served by pid %d", os.Getpid())
			c.Close()
		}
	}
	res, err := p.run(context.Background(), &jail.Spec{Egress: &jail.Egress{Serve: serve}, Command: box.Command{Args: []string{"egress"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != fmt.Sprintf("served by pid %d", os.Getpid()) || res.Egress == nil || res.Egress.Connections != 1 || res.Egress.BytesIn != 42 {
		t.Errorf("result %+v, egress %+v", res, res.Egress)
	}
	// A run that fails before its sandbox exists sends no listener.
	_, err = p.run(context.Background(), &jail.Spec{Egress: &jail.Egress{Serve: serve}, Command: box.Command{Args: []string{"notfound"}}}, "")
	if !errors.Is(err, box.ErrCommandNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
	served.Wait()
}
