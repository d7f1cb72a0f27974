package policy

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResolveWatch: once a cached resolution has been checked with its
// paths watched, it is trusted without reading them (one poll), and a
// change the watch must see still makes the lookup turn out anew: a file
// created earlier in PATH, a directory's mode, a directory swapped by
// rename, and a mount over a PATH directory, which inotify does not see
// and the poll of the mount table does.
func TestResolveWatch(t *testing.T) {
	root := fakeRoot(t)
	r := NewRoot(root)
	r.racy = 0
	key := resolveKey{name: "date"}
	// trusted resolves date until the cache trusts it without an lstat,
	// and says whether it did within a few lookups.
	trusted := func() bool {
		t.Helper()
		for range 3 {
			if _, _, err := r.Resolve("date", "", ""); err != nil {
				t.Fatal(err)
			}
			if res := r.cache.get(key); res != nil && res.fresh(watched.current()) {
				return true
			}
		}
		return false
	}
	want := func(step, p string) {
		t.Helper()
		got, _, err := r.Resolve("date", "", "")
		if err != nil {
			got = err.Error()
		}
		if got != p {
			t.Errorf("%s: Resolve(date) = %q, want %q", step, got, p)
		}
	}
	settle()
	if !trusted() {
		t.Fatal("date is never trusted without an lstat: the watch is not in use")
	}

	// Elsewhere: a new entry in an ancestor (not the one that leads down)
	// is not a change of anything date depends on.
	other := t.TempDir()
	must(t, os.WriteFile(filepath.Join(other, "date"), []byte("#!/bin/true other\n"), 0o755))
	if res := r.cache.get(key); !res.fresh(watched.current()) {
		t.Error("a change outside date's paths made its resolution stale")
	}

	must(t, os.WriteFile(filepath.Join(root, "usr/local/bin/date"), []byte("#!/bin/true local\n"), 0o755))
	want("created earlier in PATH", "/usr/local/bin/date")
	must(t, os.Remove(filepath.Join(root, "usr/local/bin/date")))
	settle()
	if !trusted() {
		t.Fatal("not trusted again after a change")
	}

	must(t, os.Chmod(filepath.Join(root, "usr/bin/date"), 0o644))
	want("no longer executable", ErrNotFound.Error())
	must(t, os.Chmod(filepath.Join(root, "usr/bin/date"), 0o755))
	settle()
	if !trusted() {
		t.Fatal("not trusted again after a change")
	}

	// usr swapped for another tree by rename: only usr's parent sees it.
	alt := filepath.Join(root, "usr.new")
	must(t, os.MkdirAll(filepath.Join(alt, "bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(alt, "local/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(alt, "local/bin/date"), []byte("#!/bin/true swapped\n"), 0o755))
	must(t, unix.Renameat2(unix.AT_FDCWD, alt, unix.AT_FDCWD, filepath.Join(root, "usr"), unix.RENAME_EXCHANGE))
	want("usr swapped", "/usr/local/bin/date")
	must(t, unix.Renameat2(unix.AT_FDCWD, alt, unix.AT_FDCWD, filepath.Join(root, "usr"), unix.RENAME_EXCHANGE))
	settle()
	if !trusted() {
		t.Fatal("not trusted again after a change")
	}

	// The root swapped for another by rename: only an ancestor of the
	// root sees it, by the name that leads down.
	root2 := fakeRoot(t)
	must(t, os.WriteFile(filepath.Join(root2, "usr/local/bin/date"), []byte("#!/bin/true root2\n"), 0o755))
	must(t, unix.Renameat2(unix.AT_FDCWD, root2, unix.AT_FDCWD, root, unix.RENAME_EXCHANGE))
	want("root swapped", "/usr/local/bin/date")
	must(t, unix.Renameat2(unix.AT_FDCWD, root2, unix.AT_FDCWD, root, unix.RENAME_EXCHANGE))
	settle()
	if !trusted() {
		t.Fatal("not trusted again after a change")
	}

	// A directory prepared elsewhere, then bound over usr/local/bin: no
	// inotify event on any watched path, only the mount table changes.
	must(t, unix.Mount(other, filepath.Join(root, "usr/local/bin"), "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(root, "usr/local/bin"), unix.MNT_DETACH) })
	want("mounted over a PATH directory", "/usr/local/bin/date")
	must(t, unix.Unmount(filepath.Join(root, "usr/local/bin"), unix.MNT_DETACH))
	want("unmounted", "/usr/bin/date")
}
