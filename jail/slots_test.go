package jail

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// writeOrphan leaves in dir, as a dead jaild would, slot n naming rec.
func writeOrphan(t *testing.T, dir string, n int, rec record) {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, string(rune('0'+n))), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireSlotPrefersClean: a new sandbox takes a clean slot over one an
// orphan still names, and leaves the orphan to its own installation.
func TestAcquireSlotPrefersClean(t *testing.T) {
	dir := t.TempDir()
	writeOrphan(t, dir, 0, record{ID: "orphan", StateRoot: "/elsewhere/containers", Owner: 1})
	var swept []string
	sweep := func(r *record) error { swept = append(swept, r.ID); return nil }
	s, err := acquireSlot(dir, &record{ID: "new"}, sweep)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	if s.n != 1 || len(swept) != 0 {
		t.Errorf("took slot %d and swept %v; want slot 1 and no sweep", s.n, swept)
	}
}

// TestSweepSlotsScope: a sweep tears down only the orphans its filter
// accepts, and keeps the others' records for their own sweeps.
func TestSweepSlotsScope(t *testing.T) {
	dir := t.TempDir()
	writeOrphan(t, dir, 0, record{ID: "ours", StateRoot: "/a/containers", Owner: 1})
	writeOrphan(t, dir, 1, record{ID: "theirs", StateRoot: "/b/containers", Owner: 1})
	var swept []string
	sweep := func(r *record) error { swept = append(swept, r.ID); return nil }
	n, err := sweepSlots(dir, func(r *record) bool { return r.StateRoot == "/a/containers" }, sweep)
	if err != nil || n != 1 || len(swept) != 1 || swept[0] != "ours" {
		t.Fatalf("sweep = %d, %v, swept %v; want only ours", n, err, swept)
	}
	if _, err := os.Stat(filepath.Join(dir, "0")); !os.IsNotExist(err) {
		t.Errorf("our swept slot's file: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "1")); err != nil {
		t.Errorf("their slot's record: %v, want it kept", err)
	}
}

// TestAbandoned: an orphan whose installation's state root is gone is
// every sweep's to take; one whose installation exists is not.
func TestAbandoned(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		rec  record
		want bool
	}{
		{record{ID: "live install", StateRoot: root}, false},
		{record{ID: "gone install", StateRoot: filepath.Join(root, "removed", "containers")}, true},
		{record{ID: "no state root"}, false},
	} {
		if got := abandoned(&c.rec); got != c.want {
			t.Errorf("abandoned(%s) = %v, want %v", c.rec.ID, got, c.want)
		}
	}
}

// takeSlot acquires a slot of dir for a sandbox id, released at the
// test's end.
func takeSlot(t *testing.T, dir, id string) *slot {
	t.Helper()
	s, err := acquireSlot(dir, &record{ID: id}, func(*record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.release)
	return s
}

// TestAcquireSlotSkipsHeld: the slots this process holds are skipped
// without touching their files, and a released one is taken again.
func TestAcquireSlotSkipsHeld(t *testing.T) {
	dir := t.TempDir()
	take := func(id string) *slot { return takeSlot(t, dir, id) }
	a, b := take("a"), take("b")
	if a.n != 0 || b.n != 1 || !isHeld(dir, 0) || !isHeld(dir, 1) {
		t.Fatalf("took slots %d and %d (held %v %v); want 0 and 1, both held", a.n, b.n, isHeld(dir, 0), isHeld(dir, 1))
	}
	// A held slot's file is not opened: were it, its missing file would
	// be created again. The search starts at 0 (the hint says so) and
	// passes 0 and 1 by.
	if err := os.Remove(filepath.Join(dir, "0")); err != nil {
		t.Fatal(err)
	}
	setSlotHint(t, dir, 0)
	if c := take("c"); c.n != 2 {
		t.Errorf("with 0 and 1 held, took %d; want 2", c.n)
	}
	if _, err := os.Stat(filepath.Join(dir, "0")); !os.IsNotExist(err) {
		t.Errorf("held slot 0's file was opened again: %v", err)
	}
	b.release()
	setSlotHint(t, dir, 0)
	if d := take("d"); d.n != 1 {
		t.Errorf("after releasing 1, took %d; want 1", d.n)
	}
	// Given up with its record kept (for the sweep), it is no longer
	// this process's.
	a.keep()
	if isHeld(dir, 0) {
		t.Error("slot 0 still marked held after keep")
	}
}

// setSlotHint makes dir's search hint name slot n.
func setSlotHint(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, nextSlotFile), fmt.Appendf(nil, "%04d\n", n), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireSlotInTurn: slots are taken in turn from where the host's
// last search ended, so a search does not pass again over the slots
// another process holds (were it to open their files, the test's removed
// ones would be made again); it goes round the ring past the last slot,
// and a hint that names no slot starts it at 0.
func TestAcquireSlotInTurn(t *testing.T) {
	dir := t.TempDir()
	take := func(id string) *slot { return takeSlot(t, dir, id) }
	// Another process holds slots 0-9: its flocks are on open file
	// descriptions of their own, which this process's marks do not know.
	for n := range 10 {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
	}
	if a := take("a"); a.n != 10 {
		t.Fatalf("with 0-9 held by another, took %d; want 10", a.n)
	}
	for n := range 10 {
		if err := os.Remove(filepath.Join(dir, strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
	}
	if b := take("b"); b.n != 11 {
		t.Errorf("the next search took %d; want 11, after the last taken", b.n)
	}
	for n := range 10 {
		if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(n))); !os.IsNotExist(err) {
			t.Errorf("slot %d's file was opened again by a later search: %v", n, err)
		}
	}

	setSlotHint(t, dir, slotCount-1)
	if c := take("c"); c.n != slotCount-1 {
		t.Errorf("from the last slot, took %d; want %d", c.n, slotCount-1)
	}
	if d := take("d"); d.n != 0 {
		t.Errorf("after the last slot, took %d; want 0 (round the ring)", d.n)
	}
	for _, bad := range []string{"junk\n", "-5\n", "99999\n", ""} {
		if err := os.WriteFile(filepath.Join(dir, nextSlotFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if e := take("e"); e.n != 1 {
			t.Errorf("with the hint %q, took %d; want 1 (the search from 0)", bad, e.n)
		} else {
			e.release()
		}
	}
	// A hint that is not a regular file is not used.
	os.Remove(filepath.Join(dir, nextSlotFile))
	if err := os.Symlink("/dev/null", filepath.Join(dir, nextSlotFile)); err != nil {
		t.Fatal(err)
	}
	if f := take("f"); f.n != 1 {
		t.Errorf("with the hint a symlink, took %d; want 1", f.n)
	}
}

// TestTornSlot: a slot file that holds no record (a torn write, a stray
// process's bytes) is never handed out again and never swept as empty: what
// ran on its uid range is unknown. Every sweep reports it, with the uid
// range, and leaves the file as it found it; doctor names it. An empty
// file (a crash between acquireSlot's truncate and its write) is free.
func TestTornSlot(t *testing.T) {
	dir := t.TempDir()
	torn := []byte(`{"id":"sb-1","state_root":"/a/containers","cgroup":{"dirs":["/sys/f` + "runtime: netpoll failed\n")
	for name, data := range map[string][]byte{"0": torn, "1": nil, "2": []byte(`{"state_root":"/a/containers"}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var swept []string
	sweep := func(r *record) error { swept = append(swept, r.ID); return nil }
	a, err := acquireSlot(dir, &record{ID: "a"}, sweep)
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	b, err := acquireSlot(dir, &record{ID: "b"}, sweep)
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if a.n != 1 || b.n != 3 {
		t.Errorf("took slots %d and %d; want 1 (empty) and 3, never 0 or 2 (no record)", a.n, b.n)
	}

	n, err := sweepSlots(dir, func(*record) bool { return true }, sweep)
	if n != 0 || len(swept) != 0 {
		t.Errorf("sweep found %d and swept %v; want nothing swept", n, swept)
	}
	for _, want := range []string{filepath.Join(dir, "0"), filepath.Join(dir, "2"), "sb-1", "1073741824-1073807359", "1073872896-1073938431"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("sweep error %v; want it to name %q", err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "0")); string(got) != string(torn) {
		t.Errorf("the torn slot now holds %q; want it left as found", got)
	}

	f := checkSlots(dir)
	if f.OK || !strings.Contains(f.Detail, "2 held by live jaild processes, 0 left") || !strings.Contains(f.Detail, filepath.Join(dir, "0")) || !strings.Contains(f.Detail, filepath.Join(dir, "2")) {
		t.Errorf("doctor's finding %+v; want not ok, 2 held, both torn files named", f)
	}
	os.Remove(filepath.Join(dir, "0"))
	os.Remove(filepath.Join(dir, "2"))
	writeOrphan(t, dir, 5, record{ID: "orphan", StateRoot: "/a/containers"})
	if f := checkSlots(dir); !f.OK || f.Detail != "2 held by live jaild processes, 1 left by dead ones (the next sweep tears them down)" {
		t.Errorf("doctor's finding %+v; want ok, 2 held, 1 orphaned", f)
	}
}

// TestSweepPassesHeldSlots: a sweep opens no slot file that a live owner
// holds, whether this process (its marks) or another (its flock, as
// /proc/locks shows it), and still tears down the orphan beside them.
func TestSweepPassesHeldSlots(t *testing.T) {
	dir := t.TempDir()
	mine := record{ID: "x", StateRoot: "/a/containers", Owner: 1}
	for n := range 3 {
		writeOrphan(t, dir, n, mine)
	}
	// Slot 0: another process's, under its flock.
	other, err := os.OpenFile(filepath.Join(dir, "0"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// Slot 3: this process's own.
	s, err := acquireSlot(dir, &record{ID: "own"}, func(*record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	if s.n != 3 {
		t.Fatalf("took slot %d; want 3", s.n)
	}

	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	var swept []string
	n, err := sweepSlots(dir, func(*record) bool { return true }, func(r *record) error { swept = append(swept, r.ID); return nil })
	if err != nil || n != 2 || len(swept) != 2 {
		t.Fatalf("sweep = %d, %v, swept %v; want the orphans of slots 1 and 2", n, err, swept)
	}
	opened := map[string]bool{}
	buf := make([]byte, 64<<10)
	k, _ := unix.Read(in, buf)
	for off := 0; off+unix.SizeofInotifyEvent <= k; {
		l := int(binary.NativeEndian.Uint32(buf[off+12:]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+l]), "\x00")
		if name != "" {
			opened[name] = true
		}
		off += unix.SizeofInotifyEvent + l
	}
	if opened["0"] || opened["3"] {
		t.Errorf("the sweep opened %v; want neither 0 (another's flock) nor 3 (this process's)", opened)
	}
	if !opened["1"] || !opened["2"] {
		t.Errorf("the sweep opened %v; want the orphans' 1 and 2", opened)
	}
	if _, err := os.Stat(filepath.Join(dir, "0")); err != nil {
		t.Errorf("the held slot's record: %v, want it kept", err)
	}
}
