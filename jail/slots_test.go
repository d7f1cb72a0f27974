package jail

import (
	"encoding/json"
	"os"
	"path/filepath"
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
