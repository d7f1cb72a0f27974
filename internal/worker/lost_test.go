package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/fdpass"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
)

// TestDeadWorkerDownOrLost: a run that a dead worker never had whole fails
// with ErrDown (unavailable: nothing ran, it may go to the next worker); one
// that it had fails with ErrLost, which is never unavailable (its command
// may have run, and must not run twice).
func TestDeadWorkerDownOrLost(t *testing.T) {
	tests := []struct {
		name string
		// worker plays the worker on its end of the control connection,
		// then dies.
		worker   func(back *net.UnixConn) error
		wantDown bool
	}{
		{"dead before the run was sent", func(*net.UnixConn) error { return nil }, true},
		{"dead holding the run", func(back *net.UnixConn) error {
			oob := make([]byte, unix.CmsgSpace(4*8))
			_, oobn, _, _, err := back.ReadMsgUnix(make([]byte, 16), oob)
			if err != nil {
				return err
			}
			fds, err := fdpass.Parse(oob[:oobn])
			if err != nil || len(fds) == 0 {
				return fmt.Errorf("run message: %v %w", fds, err)
			}
			run := os.NewFile(uintptr(fds[0]), "run")
			for _, fd := range fds[1:] {
				unix.Close(fd)
			}
			defer run.Close() // dies with the run, never answering
			var ws wireSpec
			return readFrame(run, &ws)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			var conns []*net.UnixConn
			for _, fd := range fds {
				f := os.NewFile(uintptr(fd), "control")
				c, err := net.FileConn(f)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				conns = append(conns, c.(*net.UnixConn))
			}
			p := &proc{ctl: conns[0], exited: make(chan struct{}), err: errors.New("signal: killed")}
			died := make(chan struct{})
			go func() {
				defer close(died)
				if err := tt.worker(conns[1]); err != nil {
					t.Errorf("worker: %v", err)
				}
				conns[1].Close()
				close(p.exited)
			}()
			if !tt.wantDown {
				// The worker's part first: a run sent after its death
				// is the other case.
				defer func() { <-died }()
			} else {
				<-died
			}
			_, err = p.run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"true"}}}, "")
			down := errors.Is(err, ErrDown) && errors.Is(err, box.ErrUnavailable)
			lost := errors.Is(err, ErrLost)
			if down != tt.wantDown || lost == tt.wantDown {
				t.Errorf("err %v: down %v lost %v, want down %v", err, down, lost, tt.wantDown)
			}
		})
	}
}
