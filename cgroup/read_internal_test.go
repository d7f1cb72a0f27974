package cgroup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestReadSmall reads files on both sides of its first buffer, a
// pseudo-file whose size reads as 0, and a missing file.
func TestReadSmall(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 9, 512, 513, 70000} {
		want := bytes.Repeat([]byte("0123456789\n"), n/11+1)[:n]
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readSmall(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: read %d, %v", n, len(got), err)
		}
	}
	want, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readSmall("/proc/self/mountinfo"); err != nil || len(got) == 0 || !bytes.Equal(got[:min(len(got), 64)], want[:min(len(want), 64)]) {
		t.Errorf("/proc/self/mountinfo: %d bytes, %v", len(got), err)
	}
	if _, err := readSmall(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
}
