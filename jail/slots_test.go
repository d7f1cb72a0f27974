package jail

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// TestAcquireSlotSkipsHeld: the slots this process holds are skipped
// without touching their files, and a released one is taken again.
func TestAcquireSlotSkipsHeld(t *testing.T) {
	dir := t.TempDir()
	sweep := func(*record) error { return nil }
	take := func(id string) *slot {
		t.Helper()
		s, err := acquireSlot(dir, &record{ID: id}, sweep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.release)
		return s
	}
	a, b := take("a"), take("b")
	if a.n != 0 || b.n != 1 || !isHeld(dir, 0) || !isHeld(dir, 1) {
		t.Fatalf("took slots %d and %d (held %v %v); want 0 and 1, both held", a.n, b.n, isHeld(dir, 0), isHeld(dir, 1))
	}
	// A held slot's file is not opened: were it, its missing file would
	// be created again.
	if err := os.Remove(filepath.Join(dir, "0")); err != nil {
		t.Fatal(err)
	}
	if c := take("c"); c.n != 2 {
		t.Errorf("with 0 and 1 held, took %d; want 2", c.n)
	}
	if _, err := os.Stat(filepath.Join(dir, "0")); !os.IsNotExist(err) {
		t.Errorf("held slot 0's file was opened again: %v", err)
	}
	b.release()
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
