package jail

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// An fdStore keeps descriptors out of the process's file table: in the
// table of one OS thread that unshared it (CLONE_FILES) and runs nothing
// but the store's goroutine.
//
// Every fork copies the forking thread's table and every exec closes the
// copies: a sandbox's init, forked and exec'd by the Manager, pays for
// every descriptor the process holds. A workspace holds three for its
// whole life (its uid slot's lock, its /work tmpfs, its network
// namespace), so with 2,000 idle sessions each sandbox start copied and
// closed 6,000 of them, about 1.7 ms of CPU (docs/performance.md). Kept
// here, they are in no table a fork copies. What needs one (a sandbox's
// init joining the namespace, libcontainer binding the tmpfs, the front
// end reading /work) reaches it by path, /proc/<pid>/task/<tid>/fd/<n>
// (see path), as it reaches the process's own through procFD.
//
// The store's thread is locked to its goroutine for good, so the Go
// scheduler never runs another goroutine on it, and it touches its table
// only with bare system calls (no os.File, nothing registered with Go's
// poller). When the store is closed the thread ends, and the kernel closes
// what it held with its table; if the process dies, the same.
type fdStore struct {
	pid, tid int
	send     int // the sending end of the socket pair, in the process's table

	mu     sync.Mutex // one operation at a time: a put's message and its receipt go together
	reqs   chan fdReq
	closed bool
	done   chan struct{}
}

// An fdReq is one operation of the store's goroutine: put receives the
// descriptors waiting on its socket, dup duplicates fds, close closes fds.
type fdReq struct {
	op    int
	fds   []int
	reply chan fdReply
}

type fdReply struct {
	fds []int
	err error
}

const (
	fdPut = iota
	fdDup
	fdClose
)

// errStoreClosed is what an operation on a closed store returns.
var errStoreClosed = errors.New("jail: descriptor store closed")

// newFDStore starts a store.
func newFDStore() (*fdStore, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("descriptor store: %w", err)
	}
	s := &fdStore{pid: os.Getpid(), send: pair[0], reqs: make(chan fdReq), done: make(chan struct{})}
	started := make(chan error, 1)
	go s.serve(pair[1], started)
	err = <-started
	// The receiving end lives on in the store's table only.
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	return s, nil
}

// serve makes the thread's table its own, keeps nothing of it but recv,
// and serves requests until the store is closed.
func (s *fdStore) serve(recv int, started chan<- error) {
	defer close(s.done)
	// Never unlocked: the thread ends with this goroutine, and its table
	// with it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		started <- fmt.Errorf("descriptor store: unshare its file table: %w", err)
		return
	}
	// The table is a copy of the process's: close all of it but recv,
	// which moves to 0, so that no file another thread closes stays open
	// here (a pipe would never see its EOF).
	if err := unix.Dup3(recv, 0, unix.O_CLOEXEC); err != nil {
		started <- fmt.Errorf("descriptor store: %w", err)
		return
	}
	if err := unix.CloseRange(1, ^uint(0), 0); err != nil {
		started <- fmt.Errorf("descriptor store: close the copied table: %w", err)
		return
	}
	s.tid = unix.Gettid()
	started <- nil
	for r := range s.reqs {
		var rep fdReply
		switch r.op {
		case fdPut:
			rep.fds, rep.err = receiveFDs(0)
		case fdDup:
			rep.fds, rep.err = dupAll(r.fds)
		case fdClose:
			for _, fd := range r.fds {
				if fd > 0 {
					unix.Close(fd)
				}
			}
		}
		r.reply <- rep
	}
}

// dupAll duplicates fds (close-on-exec, never at 0, the store's socket) and
// returns the copies; on an error it closes those it made.
func dupAll(fds []int) ([]int, error) {
	var dups []int
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 1)
		if err != nil {
			for _, d := range dups {
				unix.Close(d)
			}
			return nil, err
		}
		dups = append(dups, d)
	}
	return dups, nil
}

// receiveFDs reads one message of the socket sock and returns the
// descriptors it carried, now in the caller's table.
func receiveFDs(sock int) ([]int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*8))
	_, oobn, flags, _, err := unix.Recvmsg(sock, b[:], oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
	if err != nil {
		return nil, fmt.Errorf("descriptor store: receive: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("descriptor store: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("descriptor store: descriptors cut short")
	}
	return fds, nil
}

// do runs one operation on the store's thread. s.mu is held.
func (s *fdStore) do(r fdReq) ([]int, error) {
	if s.closed {
		return nil, errStoreClosed
	}
	r.reply = make(chan fdReply, 1)
	s.reqs <- r
	rep := <-r.reply
	return rep.fds, rep.err
}

// put copies fds (at most 8) into the store and returns their numbers
// there, in order. The caller still holds its own and closes them.
func (s *fdStore) put(fds ...int) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errStoreClosed
	}
	if err := unix.Sendmsg(s.send, []byte{0}, unix.UnixRights(fds...), nil, 0); err != nil {
		return nil, fmt.Errorf("descriptor store: send: %w", err)
	}
	got, err := s.do(fdReq{op: fdPut})
	if err == nil && len(got) != len(fds) {
		s.do(fdReq{op: fdClose, fds: got})
		err = fmt.Errorf("descriptor store: %d descriptors sent, %d received", len(fds), len(got))
	}
	return got, err
}

// dup duplicates the stored ns, in one round with the store's thread, and
// returns the copies' numbers: a path through one stays that of the same
// file until the copy is closed, however the original's number is reused.
func (s *fdStore) dup(ns ...int) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, err := s.do(fdReq{op: fdDup, fds: ns})
	if err != nil {
		return nil, fmt.Errorf("descriptor store: dup: %w", err)
	}
	return got, nil
}

// close closes the stored ns; negative numbers are skipped.
func (s *fdStore) close(ns ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.do(fdReq{op: fdClose, fds: ns})
}

// path is the path of the stored n, for this process and its children.
func (s *fdStore) path(n int) string {
	return fmt.Sprintf("/proc/%d/task/%d/fd/%d", s.pid, s.tid, n)
}

// shut ends the store's thread, which closes everything it held.
func (s *fdStore) shut() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.reqs)
		unix.Close(s.send)
	}
	s.mu.Unlock()
	<-s.done
}
