package pidfile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestHeldAndStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.pid")
	if _, err := Signal(path, 0); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no file: %v, want ErrNotRunning", err)
	}
	p, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path); !errors.Is(err, ErrHeld) {
		t.Errorf("second Create: %v, want ErrHeld", err)
	}
	pid, err := Signal(path, 0)
	if err != nil || pid != os.Getpid() {
		t.Errorf("Signal: pid %d, %v; want %d", pid, err, os.Getpid())
	}
	if err := Wait(path, 200*time.Millisecond); err == nil {
		t.Error("Wait returned while the file is held")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Wait(path, time.Second); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}
	// A file naming a live pid that nobody holds is stale: a reused pid
	// must not be signalled.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Signal(path, unix.SIGKILL); !errors.Is(err, ErrNotRunning) {
		t.Errorf("stale file: %v, want ErrNotRunning", err)
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "serve.pid")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if p, err := Create(link); err == nil {
		p.Close()
		t.Fatal("Create followed a symlink")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink's target was created: %v", err)
	}
}
