package files

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/jaild/jaild/internal/fdpass"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// A Charger starts a process in the cgroup that the memory of workspace
// writes is charged to (a *cgroup.Group: the sandboxes' parent's files
// cgroup). Start must not return before the process is in that cgroup.
type Charger interface {
	Start(cmd *exec.Cmd) error
}

// Why a second process writes the data. A workspace is a tmpfs: its pages
// are memory, charged to the memory cgroup of the process that writes
// them, and they stay charged there as long as the file exists. Written by
// the daemon, an upload would be charged to the daemon's cgroup, outside
// the sandboxes' aggregate budget, and sessions could hold their whole
// quotas there. So the daemon opens and checks everything itself (openat2,
// the new file, its owner and mode, the rename), and hands the writer only
// the open descriptor of the new file and the bytes: the writer resolves no
// path and needs no privilege (it runs as nobody), and the pages it
// allocates are charged to the cgroup the Charger put it in.
//
// The protocol, on a SOCK_SEQPACKET socketpair at the writer's fd 3 (each
// message one record, its first byte its kind):
//
//	'f' + SCM_RIGHTS(fd)  the next file to write; the previous one is closed
//	'd' + bytes           data, appended to the file
//	'e'                   the end of the file
//
// and the writer answers each file once: 'r', the errno of the first write
// that failed (0: none), and the bytes written, big-endian uint32 and
// uint64. It answers at the first failure, and then drops the file's data
// until 'e', so that the daemon stops sending early (a full workspace).
const (
	writerArg   = "jaild-files-writer"
	writerFD    = 3
	writerChunk = 64 << 10 // under any socket's send buffer, so one message always fits
	replyLen    = 1 + 4 + 8
)

// WriterMain runs the workspace writer and exits if this process was
// started as one (by an FS with a Charger), and returns at once otherwise.
// A binary whose handler is given a Charger calls it first thing in main;
// a test binary, in TestMain.
func WriterMain() {
	if len(os.Args) != 2 || os.Args[1] != writerArg {
		return
	}
	os.Exit(serveWriter(writerFD))
}

// serveWriter serves the protocol above on sock until it reaches EOF.
func serveWriter(sock int) int {
	buf := make([]byte, 1+writerChunk)
	oob := make([]byte, unix.CmsgSpace(4))
	cur := -1
	var n int64
	var werr unix.Errno
	replied := false
	reply := func() bool {
		var r [replyLen]byte
		r[0] = 'r'
		binary.BigEndian.PutUint32(r[1:], uint32(werr))
		binary.BigEndian.PutUint64(r[5:], uint64(n))
		replied = true
		_, err := unix.Write(sock, r[:])
		return err == nil
	}
	for {
		m, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 1
		}
		if m == 0 {
			return 0 // the daemon closed its end
		}
		switch buf[0] {
		case 'f':
			fds, err := fdpass.Parse(oob[:oobn])
			if err != nil || len(fds) != 1 {
				return 2
			}
			if cur >= 0 {
				unix.Close(cur)
			}
			cur, n, werr, replied = fds[0], 0, 0, false
		case 'd':
			if cur < 0 {
				return 2
			}
			if werr != 0 {
				continue
			}
			for b := buf[1:m]; len(b) > 0; {
				k, err := unix.Write(cur, b)
				if errors.Is(err, unix.EINTR) {
					continue
				}
				if err != nil {
					werr = errnoOf(err)
					break
				}
				n += int64(k)
				b = b[k:]
			}
			if werr != 0 && !reply() {
				return 1
			}
		case 'e':
			if cur < 0 {
				return 2
			}
			if !replied && !reply() {
				return 1
			}
			unix.Close(cur)
			cur = -1
		default:
			return 2
		}
	}
}

func errnoOf(err error) unix.Errno {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return unix.EIO
}

// writer is the daemon's end of a running writer process.
type writer struct {
	cmd  *exec.Cmd
	sock int
	buf  []byte
	dead bool // died has reaped it
}

// errWriterDied: the writer process was killed while it wrote, which the
// kernel's OOM killer does when the sandboxes' memory budget is used up.
var errWriterDied = errors.New("the process writing to the workspace was killed (the sandboxes' memory budget may be used up)")

// startWriter starts a writer in the cgroup c puts it in.
func startWriter(c Charger) (*writer, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("files: writer socket: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "writer")
	defer child.Close()
	cmd := exec.Command("/proc/self/exe", writerArg)
	cmd.ExtraFiles = []*os.File{child}
	// Nothing of the daemon's environment: a Go runtime sized for one
	// thread is all it needs.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Dir = "/"
	// It is handed open descriptors only: no privilege is needed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := c.Start(cmd); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("files: start writer: %w", err)
	}
	return &writer{cmd: cmd, sock: fds[0], buf: make([]byte, 1+writerChunk)}, nil
}

// close ends the writer and reaps it.
func (w *writer) close() error {
	if w.dead {
		return nil
	}
	w.dead = true
	unix.Close(w.sock)
	return w.cmd.Wait()
}

// died is the error of a writer that stopped answering.
func (w *writer) died(err error) error {
	w.dead = true
	unix.Close(w.sock)
	if werr := w.cmd.Wait(); werr != nil {
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				return fmt.Errorf("%w: %w", ErrNoSpace, errWriterDied)
			}
		}
		return fmt.Errorf("files: writer: %w (%v)", werr, err)
	}
	return fmt.Errorf("files: writer exited: %v", err)
}

// copy writes r to the open file fd through the writer. An error from the
// file is the kernel's errno (ENOSPC for a full workspace); one from r is
// r's. After an error from the writer itself, w is unusable.
func (w *writer) copy(ctx context.Context, fd int, r io.Reader) (int64, error) {
	send := func(b []byte, oob []byte) error {
		for {
			err := unix.Sendmsg(w.sock, b, oob, nil, unix.MSG_NOSIGNAL)
			if !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	}
	if err := send([]byte{'f'}, unix.UnixRights(fd)); err != nil {
		return 0, w.died(err)
	}
	var rerr error
	for {
		if err := ctx.Err(); err != nil {
			rerr = err
			break
		}
		n, err := r.Read(w.buf[1:])
		if n > 0 {
			if done, ok := w.poll(); ok {
				// The file failed: stop sending.
				_ = send([]byte{'e'}, nil)
				return done()
			}
			w.buf[0] = 'd'
			if err := send(w.buf[:1+n], nil); err != nil {
				return 0, w.died(err)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	if err := send([]byte{'e'}, nil); err != nil {
		return 0, w.died(err)
	}
	n, werr, err := w.reply(0)
	if err != nil {
		return 0, w.died(err)
	}
	if werr != 0 {
		return n, werr
	}
	return n, rerr
}

// poll checks for an early answer (a failed write) without waiting.
func (w *writer) poll() (func() (int64, error), bool) {
	n, werr, err := w.reply(unix.MSG_DONTWAIT)
	if errors.Is(err, unix.EAGAIN) {
		return nil, false
	}
	return func() (int64, error) {
		if err != nil {
			return 0, w.died(err)
		}
		return n, werr
	}, true
}

// reply reads the writer's answer for a file.
func (w *writer) reply(flags int) (int64, unix.Errno, error) {
	var r [replyLen + 1]byte
	for {
		m, _, err := unix.Recvfrom(w.sock, r[:], flags)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		if m != replyLen || r[0] != 'r' {
			return 0, 0, fmt.Errorf("bad answer (%d bytes)", m)
		}
		return int64(binary.BigEndian.Uint64(r[5:])), unix.Errno(binary.BigEndian.Uint32(r[1:])), nil
	}
}
