package files_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/session/files"
)

// TestSymlinkRace: while every operation runs, a goroutine keeps swapping
// a directory with a symlink out of the workspace (RENAME_EXCHANGE, as a
// job running in the session could). Whatever wins each race, nothing
// lands outside.
func TestSymlinkRace(t *testing.T) {
	h := newWorkspace(t, 8<<20)
	h.layout(t, "d d\nl abs {outside}\nl rel ../outside\nd e\nf e/f old")
	fsys, err := files.Open(h.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	swaps := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			link := h.path("abs")
			if i%2 == 1 {
				link = h.path("rel")
			}
			if unix.Renameat2(unix.AT_FDCWD, h.path("d"), unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) == nil {
				swaps++
			}
			// A file swapped with a symlink to the canary too.
			_ = unix.Renameat2(unix.AT_FDCWD, h.path("e/f"), unix.AT_FDCWD, h.path("abs"), unix.RENAME_EXCHANGE)
		}
	}()

	ctx := context.Background()
	archive := tarOf(t, entry{name: "t/a", body: "tar"}, entry{name: "t/b", body: "tar"})
	landed := 0
	for i := 0; i < 1000; i++ {
		if _, err := fsys.Write(ctx, "d/f", strings.NewReader("new"), 0); err == nil {
			landed++
		}
		_, _ = fsys.Write(ctx, "d/x/y/z", strings.NewReader("new"), 0)
		_, _ = fsys.Write(ctx, "e/f", strings.NewReader("new"), 0)
		_, _ = fsys.Untar(ctx, "d", bytes.NewReader(archive), 0)
		if f, err := fsys.Open("d/f"); err == nil {
			f.Close()
		}
		if f, err := fsys.Open("abs"); err == nil {
			f.Close()
		}
		_ = fsys.Remove(ctx, "d/x")
		_ = fsys.Remove(ctx, "d/t")
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps, %d of 1000 writes landed inside", swaps, landed)
	if swaps == 0 || landed == 0 {
		t.Errorf("the race did not run: %d swaps, %d writes", swaps, landed)
	}
	h.check(t)
}
