package jail

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFDStore: a descriptor put in the store is held there and nowhere in
// the process's table, reached by its path, duplicated and closed there;
// and what the store holds goes when it shuts, as it would with the
// process.
func TestFDStore(t *testing.T) {
	st, err := newFDStore()
	if err != nil {
		t.Fatal(err)
	}
	defer st.shut()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := st.put(int(w.Fd()))
	if err != nil || len(got) != 1 {
		t.Fatalf("put: %v, %v", got, err)
	}
	n := got[0]
	w.Close()
	// The store's copy keeps the pipe open: no EOF.
	if eof(t, r, 50*time.Millisecond) {
		t.Fatal("EOF with the write end in the store")
	}
	// Nothing of the pipe's write end is left in the process's table.
	if ends := inTable(t, "/proc/self/fd", r); ends != 1 {
		t.Errorf("the process's table holds %d ends of the pipe, want the read end only", ends)
	}
	if ends := inTable(t, filepath.Dir(st.path(n)), r); ends != 1 {
		t.Errorf("the store's table holds %d ends of the pipe, want the write end", ends)
	}
	write := func(p string) {
		t.Helper()
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		defer f.Close()
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
			t.Fatalf("read through %s: %q, %v", p, buf, err)
		}
	}
	write(st.path(n))
	ds, err := st.dup(n)
	if err != nil || len(ds) != 1 || ds[0] == n {
		t.Fatalf("dup: %v, %v", ds, err)
	}
	d := ds[0]
	st.close(n)
	write(st.path(d)) // the duplicate outlives the original
	if eof(t, r, 50*time.Millisecond) {
		t.Fatal("EOF with the duplicate still in the store")
	}
	st.close(d)
	if !eof(t, r, time.Second) {
		t.Fatal("no EOF once the store closed both")
	}

	// Shut: the store's thread ends, and the kernel closes its table.
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if _, err := st.put(int(w2.Fd())); err != nil {
		t.Fatal(err)
	}
	w2.Close()
	st.shut()
	if !eof(t, r2, 5*time.Second) {
		t.Fatal("no EOF once the store was shut")
	}
	if _, err := st.put(int(r2.Fd())); err == nil {
		t.Error("put on a shut store worked")
	}
}

// eof reports whether reading r finds EOF within d.
func eof(t *testing.T, r *os.File, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(d.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	return n == 1 && fds[0].Revents&unix.POLLHUP != 0
}

// inTable counts the descriptors in the fd directory dir that are ends of
// the pipe r belongs to.
func inTable(t *testing.T, dir string, r *os.File) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	want := "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == want {
			n++
		}
	}
	return n
}
