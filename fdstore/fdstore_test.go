package fdstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/fdstore"
)

func start(t *testing.T) *fdstore.Store {
	t.Helper()
	s, err := fdstore.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shut(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// tableLen counts the descriptors of the store's table, its socket left
// out, as the kernel shows them.
func tableLen(t *testing.T, s *fdstore.Store) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(s.Path(0)))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1
}

func processFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// writeErr is what a write to the pipe's w gets: nil while a read end is
// open somewhere, EPIPE once none is.
func writeErr(w *os.File) error {
	_, err := unix.Write(int(w.Fd()), []byte{'x'})
	return err
}

// TestStartsEmpty: the thread's table starts with its socket only, however
// many descriptors the process holds.
func TestStartsEmpty(t *testing.T) {
	for range 20 {
		pipe(t)
	}
	s := start(t)
	if n := tableLen(t, s); n != 0 {
		t.Errorf("a new store's table holds %d descriptors besides its socket", n)
	}
}

// TestHolds: a stored descriptor keeps its file open after the caller
// closes its own, outside the process's table, until Close; Open reaches
// the same file.
func TestHolds(t *testing.T) {
	s := start(t)
	r, w := pipe(t)
	before := processFDs(t)
	got, err := s.Put(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if n := processFDs(t); n != before-1 {
		t.Errorf("the process's table holds %d descriptors, want %d", n, before-1)
	}
	if n := tableLen(t, s); n != 1 || s.Len() != 1 {
		t.Errorf("the store holds %d (Len %d), want 1", n, s.Len())
	}
	if err := writeErr(w); err != nil {
		t.Fatalf("the stored read end was closed: %v", err)
	}
	f, err := s.Open(got[0], unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := f.Read(b[:]); n != 1 || b[0] != 'x' {
		t.Errorf("read through Open: %d %q %v", n, b, err)
	}
	f.Close()
	if err := s.Close(got[0]); err != nil {
		t.Fatal(err)
	}
	if err := writeErr(w); !errors.Is(err, unix.EPIPE) {
		t.Errorf("after Close, a write to the pipe got %v, want EPIPE", err)
	}
	if _, err := s.Open(got[0], unix.O_RDONLY); !errors.Is(err, unix.EBADF) {
		t.Errorf("Open of a closed number: %v", err)
	}
	if n := tableLen(t, s); n != 0 {
		t.Errorf("the store's table still holds %d", n)
	}
}

// TestOpenChecksTheFile: a number that now holds another file (put behind
// the Store's back, as a reused number would) is refused.
func TestOpenChecksTheFile(t *testing.T) {
	s := start(t)
	a, _ := pipe(t)
	b, _ := pipe(t)
	got, err := s.Put(int(a.Fd()), int(b.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := s.Open(got[1], unix.O_RDONLY); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	// Swap what the two numbers hold in the thread's table: the paths
	// then lead to the other pipe.
	if err := s.Close(got[0]); err != nil {
		t.Fatal(err)
	}
	again, err := s.Put(int(b.Fd()))
	if err != nil || again[0] != got[0] {
		t.Fatalf("put again: %v %v (want number %d reused)", again, err, got[0])
	}
	if f, err := s.Open(got[0], unix.O_RDONLY); err != nil {
		t.Errorf("the reused number, put anew: %v", err)
	} else {
		f.Close()
	}
}

// TestShut: Shut closes all the store held; calls after it fail with
// ErrClosed; a second Shut is a no-op.
func TestShut(t *testing.T) {
	s, err := fdstore.Start()
	if err != nil {
		t.Fatal(err)
	}
	r, w := pipe(t)
	if _, err := s.Put(int(r.Fd())); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := s.Shut(); err != nil {
		t.Fatal(err)
	}
	if err := writeErr(w); !errors.Is(err, unix.EPIPE) {
		t.Errorf("after Shut, a write to the pipe got %v, want EPIPE", err)
	}
	if _, err := s.Put(int(w.Fd())); !errors.Is(err, fdstore.ErrClosed) {
		t.Errorf("Put after Shut: %v", err)
	}
	if err := s.Close(3); !errors.Is(err, fdstore.ErrClosed) {
		t.Errorf("Close after Shut: %v", err)
	}
	if err := s.Shut(); err != nil {
		t.Errorf("second Shut: %v", err)
	}
	// The thread answers, then ends.
	task := filepath.Dir(filepath.Dir(s.Path(0)))
	for i := 0; ; i++ {
		if _, err := os.Stat(task); err != nil {
			break
		}
		if i == 500 {
			t.Fatalf("the thread still runs 5 s after Shut")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPutLimits: nothing or more than MaxPut is refused with nothing
// stored.
func TestPutLimits(t *testing.T) {
	s := start(t)
	r, _ := pipe(t)
	many := make([]int, fdstore.MaxPut+1)
	for i := range many {
		many[i] = int(r.Fd())
	}
	for _, fds := range [][]int{nil, many} {
		if _, err := s.Put(fds...); err == nil {
			t.Errorf("put %d descriptors: no error", len(fds))
		}
	}
	if _, err := s.Put(-1); err == nil {
		t.Error("put -1: no error")
	}
	if n := tableLen(t, s); n != 0 {
		t.Errorf("the store holds %d", n)
	}
}

// TestUnderGC: the store survives garbage collections started from every
// goroutine while it works. A store on a Go thread did not: the runtime
// polled its epoll descriptor from the thread's own table and died.
func TestUnderGC(t *testing.T) {
	s := start(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sink [][]byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				sink = append(sink, make([]byte, 64<<10))
				if len(sink) > 64 {
					sink = nil
					runtime.GC()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	r, _ := pipe(t)
	var ops sync.WaitGroup
	for range 4 {
		ops.Add(1)
		go func() {
			defer ops.Done()
			for range 5000 {
				got, err := s.Put(int(r.Fd()))
				if err != nil {
					t.Error(err)
					return
				}
				f, err := s.Open(got[0], unix.O_RDONLY)
				if err != nil {
					t.Error(err)
					return
				}
				f.Close()
				if err := s.Close(got[0]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	ops.Wait()
	if n := tableLen(t, s); n != 0 {
		t.Errorf("the store holds %d", n)
	}
}
