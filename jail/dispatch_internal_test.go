package jail

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestWatchdogNeedsDispatch: in a binary that has not called MaybeWatchdog,
// a Manager starts no watchdog (which would run the binary's main), and so
// no sandbox.
func TestWatchdogNeedsDispatch(t *testing.T) {
	was := dispatching.Load()
	dispatching.Store(false)
	t.Cleanup(func() { dispatching.Store(was) })
	w := newWatchdog(watchdogConfig{Owner: os.Getpid(), SlotDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if p, err := w.start(); !errors.Is(err, errNoDispatch) {
		if p != nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			p.life.Close()
		}
		t.Fatalf("start without dispatch: %v, want errNoDispatch", err)
	}
}

// TestImportDoesNotTakeOver: a program that imports package jail, started
// with the watchdog's argument, runs its own main: only MaybeWatchdog makes
// a process a watchdog.
func TestImportDoesNotTakeOver(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool")
		}
	}
	bin := filepath.Join(t.TempDir(), "nodispatch")
	build := exec.Command(goTool, "build", "-o", bin, "./testdata/nodispatch")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, WatchdogArg, `{"owner":1,"slot_dir":"/nonexistent"}`).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "main ran") {
		t.Fatalf("nodispatch watchdog: %v, output %q; want its own main's output", err, out)
	}
}
