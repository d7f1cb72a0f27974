package jail_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// newWorkspace makes a workspace of size bytes with opts, closed (and the
// Close checked) at cleanup.
func newWorkspace(t *testing.T, m *jail.Manager, size int64, opts ...jail.WorkspaceOption) *jail.Workspace {
	t.Helper()
	ws, err := m.NewWorkspace(size, opts...)
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	t.Cleanup(func() {
		if err := ws.Close(); err != nil {
			t.Errorf("Workspace.Close: %v", err)
		}
	})
	return ws
}

func inWS(ws *jail.Workspace, script string) *jail.Spec {
	s := sh(script)
	s.Workspace = ws
	return s
}

// TestWorkspacePersists: files outlive the sandbox that wrote them, stay
// the sandbox user's in the next one (same uid range), while /tmp is fresh.
func TestWorkspacePersists(t *testing.T) {
	m := newManager(t)
	ws := newWorkspace(t, m, 0)
	res := run(t, m, inWS(ws, "echo one > /work/f && mkdir -m 700 /work/d && echo x > /work/d/g && echo t > /tmp/t && echo ok"))
	if res.ExitCode != 0 || res.Stdout != "ok\n" {
		t.Fatalf("call 1: %+v", res)
	}
	res = run(t, m, inWS(ws, "echo two >> /work/f && cat /work/f /work/d/g && stat -c '%U %a' /work/d && ls /tmp"))
	if want := "one\ntwo\nx\nsandbox 700\n"; res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("call 2: got %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
	// On the host the files belong to the workspace's range, never to a
	// host user.
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(ws.Dir(), "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid < 1<<30 {
		t.Errorf("workspace file owned by host uid %d, want one of a sandbox range", st.Uid)
	}
	// HostIDs names that owner, for a front end that writes files there.
	if uid, gid := ws.HostIDs(); st.Uid != uint32(uid) || st.Gid != uint32(gid) {
		t.Errorf("file owned by %d:%d, HostIDs %d:%d", st.Uid, st.Gid, uid, gid)
	}
	// Workspace.Run is Manager.Run on the workspace.
	if res, err := ws.Run(context.Background(), sh("cat /work/f")); err != nil || res.Stdout != "one\ntwo\n" {
		t.Errorf("Workspace.Run: %+v, %v", res, err)
	}
	if used, err := ws.Used(); err != nil || used <= 0 {
		t.Errorf("Used = %d, %v", used, err)
	}
}

// TestWorkspaceIsolation: a workspace's files and network are its own, and a
// one-shot sandbox still gets a fresh /work.
func TestWorkspaceIsolation(t *testing.T) {
	m := newManager(t)
	a := newWorkspace(t, m, 0)
	b := newWorkspace(t, m, 0)
	run(t, m, inWS(a, "echo secret > /work/a"))
	for name, spec := range map[string]*jail.Spec{"other workspace": inWS(b, "ls -A /work"), "one-shot": sh("ls -A /work")} {
		if res := run(t, m, spec); res.Stdout != "" || res.ExitCode != 0 {
			t.Errorf("%s sees %q (exit %d)", name, res.Stdout, res.ExitCode)
		}
	}
}

// TestWorkspaceNetwork: a server started in one sandbox of a workspace is
// reachable from the next sandbox of the same workspace, and from no other.
func TestWorkspaceNetwork(t *testing.T) {
	m := newManager(t)
	a := newWorkspace(t, m, 0)
	b := newWorkspace(t, m, 0)
	fetch := serveInWorkspace(t, m, a)
	for name, spec := range map[string]*jail.Spec{"other workspace": inWS(b, fetch), "one-shot": sh(fetch)} {
		if res := run(t, m, spec); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Connection refused") {
			t.Errorf("%s reached the server: exit %d, %q %q", name, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	// The shared namespace is loopback only, and its root cannot change
	// that.
	res := run(t, m, inWS(a, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; ip link add dummy0 type dummy 2>&1 || echo refused"))
	if !strings.HasPrefix(res.Stdout, "lo\n") || !strings.Contains(res.Stdout, "refused") || strings.Count(res.Stdout, "\n") != 3 {
		t.Errorf("interfaces: %q", res.Stdout)
	}
}

// TestWorkspaceQuota: the kernel stops a write at the workspace's size.
func TestWorkspaceQuota(t *testing.T) {
	m := newManager(t)
	ws := newWorkspace(t, m, 1<<20)
	res := run(t, m, inWS(ws, "dd if=/dev/zero of=/work/big bs=64k count=64"))
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
		t.Fatalf("dd beyond the quota: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	res = run(t, m, inWS(ws, "rm /work/big && echo ok > /work/small && cat /work/small"))
	if res.Stdout != "ok\n" {
		t.Errorf("workspace unusable after a full disk: %+v", res)
	}
	if _, err := m.NewWorkspace(100); !box.IsInvalid(err) {
		t.Errorf("NewWorkspace(100) = %v, want an invalid size", err)
	}
}

// TestWorkspaceCloseKills: closing a workspace with a sandbox still running
// kills it and leaves nothing (testenv checks the mounts); the closed
// workspace runs nothing more.
func TestWorkspaceCloseKills(t *testing.T) {
	m := newManager(t)
	ws, err := m.NewWorkspace(0)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan *box.Result, 1)
	go func() {
		res, _ := m.Run(context.Background(), &jail.Spec{Workspace: ws, Command: box.Command{
			Args: []string{"sh", "-c", "echo started; exec sleep 1000"}, Timeout: time.Hour,
			Stdout: onFirstWrite(func() { close(started) }),
		}})
		done <- res
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the sandbox did not start")
	}
	if err := ws.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case res := <-done:
		if res == nil || res.Signal != "SIGKILL" {
			t.Errorf("sandbox ended with %+v, want SIGKILL", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sandbox still running after Close")
	}
	if _, err := m.Run(context.Background(), &jail.Spec{Workspace: ws, Command: box.Command{Args: []string{"true"}}}); err == nil {
		t.Error("a run on a closed workspace succeeded")
	}
}

// onFirstWrite is a writer that calls f on its first write.
func onFirstWrite(f func()) io.Writer {
	var once sync.Once
	return writerFunc(func(p []byte) (int, error) { once.Do(f); return len(p), nil })
}

// TestWorkspaceCrashSweep: a jaild SIGKILLed with a workspace and a sandbox
// running on it leaves a record; the next start removes the sandbox (and
// with it what is left of the workspace: the tmpfs, unless detached, and
// the network namespace went with their holders).
func TestWorkspaceCrashSweep(t *testing.T) {
	env, owner := startWorkspaceHelper(t)
	// Owner and watchdog die together: the next start sweeps.
	testenv.KillWithWatchdog(t, env, owner)
	if len(testenv.ProcsInCgroup(filepath.Base(env.Parent))) == 0 {
		t.Fatal("the orphan is already gone; the test would prove nothing")
	}
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	// testenv's check at cleanup asserts that no process, cgroup, slot,
	// mount or workspace is left.
}

// TestWorkspaceWatchdogSweep: the owner alone dies; its watchdog removes
// the workspace, its netns and its sandboxes.
func TestWorkspaceWatchdogSweep(t *testing.T) {
	env, owner := startWorkspaceHelper(t)
	// Its slot lock, tmpfs and namespace are in the descriptor store's
	// table, which dies with the process as its own table does.
	want := jail.StoredWorkspaceFDs(jail.DetachedMountsWork())
	if n := storeThreadFDs(t, owner.Process.Pid); n != want {
		t.Errorf("the helper's descriptor store holds %d descriptors, want %d", n, want)
	}
	_ = owner.Process.Signal(syscall.SIGKILL)
	_ = owner.Wait()
	waitFor(t, 20*time.Second, "the watchdog to sweep and exit", func() bool { return len(testenv.Watchdogs(env.StateDir)) == 0 })
	// testenv's check at cleanup: nothing left, without another jaild.
}

// storeThreadFDs counts the descriptors of pid's threads that are not in
// the process's own table: those of a thread whose table holds fewer than
// the main thread's (the descriptor store's, its socket left out); -1 if
// no thread has one.
func storeThreadFDs(t *testing.T, pid int) int {
	t.Helper()
	count := func(tid string) int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task/%s/fd", pid, tid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	main := count(strconv.Itoa(pid))
	for _, task := range tasks {
		if n := count(task.Name()); n < main {
			return n - 1
		}
	}
	return -1
}

// startWorkspaceHelper starts helperWorkspace on a private installation
// and waits until its command runs on the workspace.
func startWorkspaceHelper(t *testing.T) (*testenv.Install, *exec.Cmd) {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cmd := testenv.StartHelper(t, env, "helper-workspace")
	// Nothing on the host but a tmpfs the kernel cannot keep detached;
	// the network namespace is never pinned.
	want := 1
	if jail.DetachedMountsWork() {
		want = 0
	}
	if got := testenv.MountsUnder(env.StateDir); len(got) != want {
		t.Fatalf("want %d mounts in the state dir, got %v", want, got)
	}
	return env, cmd
}

// helperWorkspace is a jaild that makes a workspace, starts a long command
// on it and says so, to be SIGKILLed.
func helperWorkspace() {
	m, err := jail.New(jail.Config{StateDir: os.Getenv("JAILD_TEST_STATE"), CgroupParent: os.Getenv("JAILD_TEST_PARENT"),
		WorkspaceRoot: os.Getenv("JAILD_TEST_WORKSPACE_ROOT")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	ws, err := m.NewWorkspace(0)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	spec := &jail.Spec{Workspace: ws, Command: box.Command{
		Args:    []string{"/bin/sh", "-c", "echo data > /work/f; sleep 1000 & echo started; sleep 1000"},
		Timeout: box.MaxTimeout,
		Stdout:  lineWriter{bufio.NewWriter(os.Stdout)},
	}}
	_, err = m.Run(context.Background(), spec)
	fmt.Println("ERR", err)
	os.Exit(1)
}

// TestExtraFiles: a command gets the caller's files as fds 3 on, and a
// reader of a passed pipe sees EOF once the caller closed its end, also
// when the command could not start.
func TestExtraFiles(t *testing.T) {
	m := newManager(t)
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr error
	}{
		{name: "written", args: []string{"/bin/sh", "-c", "echo hi >&3"}, want: "hi\n"},
		{name: "start fails", args: []string{"/nonexistent"}, wantErr: box.ErrCommandNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			_, err = m.Run(context.Background(), &jail.Spec{Command: box.Command{Args: tt.args, ExtraFiles: []*os.File{w}}})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run: %v, want %v", err, tt.wantErr)
			}
			w.Close()
			_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(r)
			if err != nil || string(got) != tt.want {
				t.Errorf("read %q, %v; want %q and EOF", got, err, tt.want)
			}
		})
	}
}

// TestWorkspaceStore: a workspace's tmpfs, network namespace (from its
// first sandbox on) and slot lock are in the descriptor store, and its Dir
// goes through it; with no store
// (one that could not start), a workspace holds them in the process's file
// table and works the same: its files persist, a server in one of its
// sandboxes answers the next.
func TestWorkspaceStore(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			m := newManager(t)
			if !stored {
				jail.NoFDStore(m)
			}
			ws := newWorkspace(t, m, 0)
			want := -1
			if stored {
				want = jail.StoredWorkspaceFDs(jail.DetachedWorkspaces(m))
			}
			// The network namespace comes with the first sandbox.
			before := want
			if stored {
				before--
			}
			if n := jail.StoreFDs(m); n != before {
				t.Errorf("the store holds %d descriptors before the first sandbox, want %d", n, before)
			}
			if jail.DetachedWorkspaces(m) && strings.Contains(ws.Dir(), "/task/") != stored {
				t.Errorf("Dir %s", ws.Dir())
			}
			serveInWorkspace(t, m, ws)
			if n := jail.StoreFDs(m); n != want {
				t.Errorf("the store holds %d descriptors, want %d", n, want)
			}
			if data, err := os.ReadFile(filepath.Join(ws.Dir(), "index.html")); err != nil || string(data) != "served\n" {
				t.Errorf("the host reads %q, %v through Dir", data, err)
			}
		})
	}
}

// serveInWorkspace starts an HTTP server serving "served\n" at
// /index.html in a sandbox on ws, stopped at cleanup, waits until another
// sandbox on ws fetches it, and returns the command that fetches it.
func serveInWorkspace(t *testing.T, m *jail.Manager, ws *jail.Workspace) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		spec := inWS(ws, "echo served > /work/index.html && cd /work && exec python3 -m http.server --bind 127.0.0.1 8000")
		spec.Timeout = time.Minute
		_, err := m.Run(ctx, spec)
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	fetch := "python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(\"http://127.0.0.1:8000/index.html\", timeout=2).read().decode())'"
	var res *box.Result
	for range 100 {
		if res = run(t, m, inWS(ws, fetch)); res.ExitCode == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.Stdout != "served\n" {
		t.Fatalf("a server in the workspace not reachable: %+v", res)
	}
	return fetch
}
