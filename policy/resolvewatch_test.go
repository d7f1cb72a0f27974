package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestResolveWatch: once a cached resolution has been checked with its
// paths watched, it is trusted without reading them (one poll), and a
// change the watch must see still makes the lookup turn out anew: a file
// created earlier in PATH, a file's mode, directories swapped by rename
// (usr, a PATH directory, the root itself), and a mount over a PATH
// directory, which inotify does not see and the poll of the mount table
// does.
func TestResolveWatch(t *testing.T) {
	root := fakeRoot(t)
	r := NewRoot(root)
	r.racy = 0
	key := resolveKey{name: "date"}
	// trusted resolves date until the cache trusts it without an lstat,
	// and says whether it did. A change of the mount table anywhere on
	// the host (another process's mounts) ends the watch's generation, so
	// it tries a few times.
	trusted := func() bool {
		t.Helper()
		for range 20 {
			if _, _, err := r.Resolve("date", "", ""); err != nil {
				t.Fatal(err)
			}
			if res := r.cache.get(key); res != nil && res.fresh(watched.current()) {
				return true
			}
			time.Sleep(10 * time.Millisecond)
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
	stillTrusted := false
	for i := 0; i < 20 && !stillTrusted; i++ {
		if !trusted() {
			t.Fatal("date is never trusted without an lstat")
		}
		must(t, os.WriteFile(filepath.Join(other, fmt.Sprint("f", i)), nil, 0o644))
		stillTrusted = r.cache.get(key).fresh(watched.current())
	}
	if !stillTrusted {
		t.Error("a change outside date's paths made its resolution stale")
	}
	must(t, os.WriteFile(filepath.Join(other, "date"), []byte("#!/bin/true other\n"), 0o755))

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

	// A PATH directory replaced by another, and left so: the watch must
	// follow the path to the directory now there, not the one it watched
	// first (which lives on, renamed).
	must(t, os.Mkdir(filepath.Join(root, "usr/local/bin.new"), 0o755))
	must(t, unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "usr/local/bin.new"), unix.AT_FDCWD, filepath.Join(root, "usr/local/bin"), unix.RENAME_EXCHANGE))
	want("PATH directory replaced", "/usr/bin/date")
	settle()
	if !trusted() {
		t.Fatal("not trusted again after a change")
	}
	must(t, os.WriteFile(filepath.Join(root, "usr/local/bin/date"), []byte("#!/bin/true new dir\n"), 0o755))
	want("created in the replaced PATH directory", "/usr/local/bin/date")
	must(t, os.Remove(filepath.Join(root, "usr/local/bin/date")))
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

// TestResolveWatchOverflow: when the kernel's queue overflows, the events
// it dropped may have been about any watched path: nothing cached is
// trusted until it is read again, and a change among the dropped events
// is seen.
func TestResolveWatchOverflow(t *testing.T) {
	root := fakeRoot(t)
	r := NewRoot(root)
	r.racy = 0
	settle()
	var res *resolution
	for range 20 {
		r.Resolve("date", "", "")
		if res = r.cache.get(resolveKey{name: "date"}); res != nil && res.fresh(watched.current()) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res == nil || !res.fresh(watched.current()) {
		t.Fatal("date is not trusted without an lstat: the watch is not in use")
	}
	var max int
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	must(t, err)
	if _, err := fmt.Sscan(string(b), &max); err != nil || max > 1<<17 {
		t.Skipf("max_queued_events %q: too many events to overflow it here", b)
	}
	// Enough events to fill the queue, none of them about date (in the
	// root's parent, about other entries than the root: each file a
	// create and a delete), then the change, whose event the kernel
	// drops.
	junk := filepath.Join(filepath.Dir(root), "junk")
	for i := 0; i < max/2+100; i++ {
		must(t, os.WriteFile(junk, nil, 0o644))
		must(t, os.Remove(junk))
	}
	must(t, os.WriteFile(filepath.Join(root, "usr/local/bin/date"), []byte("#!/bin/true local\n"), 0o755))
	if res.fresh(watched.current()) {
		t.Error("trusted after an overflow")
	}
	if p, _, _ := r.Resolve("date", "", ""); p != "/usr/local/bin/date" {
		t.Errorf("after an overflow: Resolve(date) = %q, want /usr/local/bin/date", p)
	}
}
