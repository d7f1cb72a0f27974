package fdstore

// #cgo CFLAGS: -Wall -Werror -O2
// #include "fdstore.h"
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limits of one call, as the thread's protocol has them (fdstore.h).
const (
	// MaxPut is the most descriptors one Put takes.
	MaxPut = C.FDSTORE_MAX_PUT
	// maxClose is the most numbers one message to close carries; Close
	// sends as many messages as it needs.
	maxClose = C.FDSTORE_MAX_CLOSE
)

// ErrClosed is what an operation on a shut Store returns.
var ErrClosed = errors.New("fdstore: store shut")

// A Store is a thread's file table that holds descriptors for the
// process. Its methods may be called from any goroutine.
type Store struct {
	pid, tid int

	mu     sync.RWMutex // Put, Close and Shut exclusive; Open shared
	sock   int          // the process's end of the thread's socket pair
	files  map[int]fileID
	closed bool
}

// A fileID names the file a stored descriptor refers to, so that Open can
// tell that the number still holds it.
type fileID struct{ dev, ino uint64 }

// Start starts a Store's thread. It fails where the kernel cannot give
// the thread a table of its own or empty it (close_range, Linux 5.9).
func Start() (*Store, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fdstore: %w", err)
	}
	if rc := C.jaild_fdstore_start(C.int(pair[1])); rc != 0 {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("fdstore: start its thread: %w", syscall.Errno(rc))
	}
	var hello [4]byte
	n, err := readFull(pair[0], hello[:])
	// Whatever the thread said, it has stopped sharing the process's
	// table, where its end now lives on in its own only.
	unix.Close(pair[1])
	if err == nil && n != len(hello) {
		err = fmt.Errorf("a %d-byte greeting", n)
	}
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("fdstore: start its thread: %w", err)
	}
	tid := int(int32(binary.NativeEndian.Uint32(hello[:])))
	if tid <= 0 {
		unix.Close(pair[0])
		return nil, fmt.Errorf("fdstore: its thread's own table: %w", syscall.Errno(-tid))
	}
	return &Store{pid: os.Getpid(), tid: tid, sock: pair[0], files: make(map[int]fileID)}, nil
}

// readFull reads one message of the thread into b.
func readFull(sock int, b []byte) (int, error) {
	for {
		n, err := unix.Read(sock, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n, err
	}
}

// Put copies fds (at most MaxPut) into the store and returns their
// numbers there, in order. The caller still holds its own and may close
// them.
func (s *Store) Put(fds ...int) ([]int, error) {
	if len(fds) == 0 || len(fds) > MaxPut {
		return nil, fmt.Errorf("fdstore: put %d descriptors (1 to %d)", len(fds), MaxPut)
	}
	ids := make([]fileID, len(fds))
	for i, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("fdstore: put: %w", err)
		}
		ids[i] = fileID{st.Dev, st.Ino}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := unix.Sendmsg(s.sock, []byte{'P'}, unix.UnixRights(fds...), nil, 0); err != nil {
		return nil, fmt.Errorf("fdstore: put: %w", err)
	}
	var buf [1 + 4*MaxPut]byte
	n, err := readFull(s.sock, buf[:])
	if err != nil {
		return nil, fmt.Errorf("fdstore: put: %w", err)
	}
	switch {
	case n == 5 && buf[0] == 'E':
		return nil, fmt.Errorf("fdstore: put: %w", syscall.Errno(binary.NativeEndian.Uint32(buf[1:])))
	case n != 1+4*len(fds) || buf[0] != 'p':
		// Not an answer to this put: the protocol is broken, and the
		// numbers could not be trusted from here on.
		s.shutLocked()
		return nil, fmt.Errorf("fdstore: put: a %d-byte answer %q for %d descriptors", n, buf[0], len(fds))
	}
	got := make([]int, len(fds))
	for i := range got {
		got[i] = int(int32(binary.NativeEndian.Uint32(buf[1+4*i:])))
		s.files[got[i]] = ids[i]
	}
	return got, nil
}

// Close closes the stored ns; numbers the store does not hold are
// skipped.
func (s *Store) Close(ns ...int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var held []int
	for _, n := range ns {
		if _, ok := s.files[n]; ok {
			held = append(held, n)
			delete(s.files, n)
		}
	}
	for len(held) > 0 {
		k := min(len(held), maxClose)
		msg := make([]byte, 1+4*k)
		msg[0] = 'C'
		for i, n := range held[:k] {
			binary.NativeEndian.PutUint32(msg[1+4*i:], uint32(n))
		}
		if err := s.ask(msg, 'c'); err != nil {
			return fmt.Errorf("fdstore: close: %w", err)
		}
		held = held[k:]
	}
	return nil
}

// ask sends msg and waits for the one-byte answer want. s.mu is held.
func (s *Store) ask(msg []byte, want byte) error {
	if _, err := unix.Write(s.sock, msg); err != nil {
		return err
	}
	var buf [1 + 4*maxClose]byte
	n, err := readFull(s.sock, buf[:])
	if err != nil {
		return err
	}
	if n != 1 || buf[0] != want {
		return fmt.Errorf("a %d-byte answer %q, want %q", n, buf[0], want)
	}
	return nil
}

// Path is the path of the stored n, for this process and, if they may
// read its descriptors, others. It names the file while n is held.
func (s *Store) Path(n int) string {
	return fmt.Sprintf("/proc/%d/task/%d/fd/%d", s.pid, s.tid, n)
}

// Open opens the stored n's file anew through its Path, with flags (plus
// O_CLOEXEC), and checks that it is the file that was put: the process's
// own descriptor, which stays that file however n is reused.
func (s *Store) Open(n int, flags int) (*os.File, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	id, ok := s.files[n]
	if !ok {
		return nil, fmt.Errorf("fdstore: open %d: %w", n, unix.EBADF)
	}
	p := s.Path(n)
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fdstore: open %s: %w", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || (fileID{st.Dev, st.Ino}) != id {
		unix.Close(fd)
		if err == nil {
			err = errors.New("another file than the one put")
		}
		return nil, fmt.Errorf("fdstore: open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Len is how many descriptors the store holds.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.files)
}

// Shut ends the store's thread, which closes everything it held first. It
// may be called more than once.
func (s *Store) Shut() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	err := s.ask([]byte{'Q'}, 'q')
	s.shutLocked()
	if err != nil {
		return fmt.Errorf("fdstore: shut: %w", err)
	}
	return nil
}

// shutLocked closes the process's end: the thread, if it still runs,
// reads its EOF and ends, and the kernel closes its table with it.
func (s *Store) shutLocked() {
	s.closed = true
	s.files = nil
	unix.Close(s.sock)
}
