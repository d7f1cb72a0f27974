package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestLeanBuild checks what jaild links: none of the front ends' packages,
// whose inits would run again in every sandbox's init process; those are
// jaild-server's.
func TestLeanBuild(t *testing.T) {
	heavy := []string{
		"github.com/jaild/jaild/server",
		"github.com/modelcontextprotocol/go-sdk/mcp",
		"github.com/prometheus/client_golang/prometheus",
		"net/http",
	}
	deps := func(pkg string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", "-tags", "seccomp", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		set := make(map[string]bool)
		for _, p := range strings.Fields(string(out)) {
			set[p] = true
		}
		return set
	}
	lean, full := deps("."), deps("../jaild-server")
	for _, p := range heavy {
		if !full[p] {
			t.Errorf("the complete build does not link %s; update this test's list", p)
		}
		if lean[p] {
			t.Errorf("the lean build links %s", p)
		}
	}
	// Nothing of the policy engine's modules in jaild: OPA's package inits
	// alone take about 7 ms, and the lean jaild is every container's init
	// (of jaild run, and of the daemon's sandboxes through its worker).
	// jaild-server decides with it, as a front end only.
	for p := range lean {
		for _, mod := range []string{"github.com/jaild/jaild/policy", "github.com/open-policy-agent/", "mvdan.cc/sh/", "github.com/fsnotify/"} {
			if strings.HasPrefix(p, mod) {
				t.Errorf("the lean build links %s", p)
			}
		}
	}
	if !full["github.com/jaild/jaild/policy"] {
		t.Error("jaild-server does not link the policy engine")
	}
	for _, p := range []string{"github.com/jaild/jaild/jail", "github.com/opencontainers/runc/libcontainer/nsenter"} {
		if !lean[p] {
			t.Errorf("the lean build does not link %s", p)
		}
	}
}

// TestFrontEndStandIns runs the lean build's serve, mcp and remote, which
// execute jaild-server next to it.
func TestFrontEndStandIns(t *testing.T) {
	for cmd, flag := range map[string]string{"serve": "--max-concurrent", "mcp": "--pool", "remote": "--session", "session": "rm", "jobs": "--follow", "cp": "SESSION:PATH"} {
		out, err := exec.Command(jaildBin, cmd, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("jaild %s --help: %v\n%s", cmd, err, out)
		}
		if !strings.Contains(string(out), flag) {
			t.Errorf("jaild %s --help does not show jaild-server's %s flag:\n%s", cmd, flag, out)
		}
	}

	// Without jaild-server next to it: a clear error and jaild's own code.
	dir := t.TempDir()
	data, err := os.ReadFile(jaildBin)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "jaild")
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lone, "serve").CombinedOutput()
	if code := exitCode(err); code != api.ExitInternal {
		t.Errorf("lone jaild serve: exit %d, want %d\n%s", code, api.ExitInternal, out)
	}
	if want := filepath.Join(dir, "jaild-server"); !strings.Contains(string(out), want) {
		t.Errorf("lone jaild serve: error does not name %s: %s", want, out)
	}
	// A jaild-server that others could have replaced is never run.
	if err := os.WriteFile(filepath.Join(dir, "jaild-server"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "jaild-server"), 0o777); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(lone, "serve").CombinedOutput()
	if code := exitCode(err); code != api.ExitInternal || strings.Contains(string(out), "ran") || !strings.Contains(string(out), "writable by group or others") {
		t.Errorf("lone jaild serve next to a world-writable jaild-server: exit %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(dir, "jaild-server")); err != nil {
		t.Fatal(err)
	}

	// doctor warns, and still passes: run and doctor need no front end.
	in := newInstall(t)
	doctor := in.cmd("doctor")
	doctor.Path, doctor.Args[0] = lone, lone
	out, err = doctor.CombinedOutput()
	if err != nil {
		t.Fatalf("lone jaild doctor: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "warn     front ends") {
		t.Errorf("lone jaild doctor does not warn about the front ends:\n%s", out)
	}
}

// leanNextTo copies the lean jaild into a new directory, searchable by all
// and writable by root alone, and returns the directory and the copy.
func leanNextTo(t *testing.T) (string, string) {
	t.Helper()
	testenv.NeedRoot(t, "the cases give files to another user")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(jaildBin)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "jaild")
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, lone
}

// copyFile copies src to dst with mode and owner uid.
func copyFile(t *testing.T, src, dst string, mode os.FileMode, uid int) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestFrontEndTrust checks the rules the lean build applies before it
// executes jaild-server as root: one that a user other than root could
// have put there or changed is never run, and the error says how to fix it.
func TestFrontEndTrust(t *testing.T) {
	const nobody = 65534
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, server string)
		want  string // DIR stands for the directory
	}{
		{"directory writable by group", func(t *testing.T, dir, server string) {
			if err := os.Chmod(dir, 0o775); err != nil {
				t.Fatal(err)
			}
		}, "DIR is writable by group or others (mode 0775): chmod go-w DIR"},
		{"directory of another user", func(t *testing.T, dir, server string) {
			if err := os.Chown(dir, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, "DIR is owned by uid 65534, not root: chown root DIR"},
		{"owned by another user", func(t *testing.T, dir, server string) {
			if err := os.Chown(server, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, "DIR/jaild-server is owned by uid 65534, not root: chown root DIR/jaild-server"},
		{"writable by group", func(t *testing.T, dir, server string) {
			if err := os.Chmod(server, 0o775); err != nil {
				t.Fatal(err)
			}
		}, "DIR/jaild-server is writable by group or others (mode 0775): chmod go-w DIR/jaild-server"},
		{"a symlink", func(t *testing.T, dir, server string) {
			// To a file that passes every check, in a directory that
			// is not checked.
			elsewhere := t.TempDir()
			if err := os.Chmod(elsewhere, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(server, elsewhere+"/jaild-server"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere+"/jaild-server", server); err != nil {
				t.Fatal(err)
			}
		}, "DIR/jaild-server is a symlink: install the binary itself next to jaild"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, lone := leanNextTo(t)
			server := filepath.Join(dir, "jaild-server")
			if err := os.WriteFile(server, []byte("#!/bin/sh\necho jaild-server-ran\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir, server)
			out, err := exec.Command(lone, "serve").CombinedOutput()
			if strings.Contains(string(out), "jaild-server-ran") {
				t.Fatalf("jaild serve ran it:\n%s", out)
			}
			want := strings.ReplaceAll(tt.want, "DIR", dir)
			if code := exitCode(err); code != api.ExitInternal || !strings.Contains(string(out), want) {
				t.Errorf("jaild serve: exit %d, want %d and an error saying %q:\n%s", code, api.ExitInternal, want, out)
			}
		})
	}
}

// TestFrontEndExecsCheckedFile swaps jaild-server, as fast as the kernel
// allows, with a file that fails the checks (a copy of false owned by
// another user) and back to one that passes them (a copy of true). The
// lean build must only ever execute the file it checked: it checks and
// executes one open descriptor. Checking the path and then executing the
// path, the swapped-in file runs now and then.
func TestFrontEndExecsCheckedFile(t *testing.T) {
	dir, lone := leanNextTo(t)
	server, other := filepath.Join(dir, "jaild-server"), filepath.Join(dir, "other")
	copyFile(t, "/bin/true", server, 0o755, 0)
	copyFile(t, "/bin/false", other, 0o755, 65534)

	stop, swapErr := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(swapErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, server, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
				swapErr <- err
				return
			}
		}
	}()
	var ran, refused int
	for i := 0; i < 100 && !t.Failed(); i++ {
		out, err := exec.Command(lone, "serve").CombinedOutput()
		switch code := exitCode(err); code {
		case 0:
			ran++
		case api.ExitInternal:
			refused++
		default:
			t.Errorf("run %d: exit %d: jaild serve executed a file other than the one it checked\n%s", i, code, out)
		}
	}
	close(stop)
	if err := <-swapErr; err != nil {
		t.Fatalf("swap: %v", err)
	}
	t.Logf("%d runs executed the checked file, %d refused the other", ran, refused)
	if ran == 0 {
		t.Errorf("the file that passes the checks never ran (%d refused)", refused)
	}
}
