package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/testenv"
)

// sleepMarker is a sleep duration no other process on the host has, to
// find a test's sandboxed sleep by its command line.
func sleepMarker() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d.%d", 300+int(b[0]), 1000+int(binary.BigEndian.Uint16(b[:])%9000))
}

// postRun starts POST /run of a shell command on addr and returns a channel
// for its status and body.
func postRun(ctx context.Context, addr, command string) <-chan string {
	out := make(chan string, 1)
	go func() {
		body := fmt.Sprintf(`{"command":%q,"timeout_seconds":120}`, command)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/run", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	return out
}

// sandboxed waits for the process of in's sandboxes whose command line
// starts with cmdline and returns its pid.
func sandboxed(t *testing.T, in install, cmdline string) int {
	t.Helper()
	name := filepath.Base(in.Parent)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		for _, p := range testenv.ProcsInCgroup(name) {
			if pid, cmd, _ := strings.Cut(p, " "); strings.HasPrefix(cmd, strconv.Quote(cmdline)[:len(cmdline)+1]) {
				n, _ := strconv.Atoi(pid)
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not run in a sandbox: %v", cmdline, testenv.ProcsInCgroup(name))
		}
	}
}

// sandboxBuilder runs a sleep in a sandbox of the daemon at addr on in and
// returns the pid of the process that built it, the sandbox's parent on the
// host. At the test's end the client goes away, which kills the sandbox.
func sandboxBuilder(t *testing.T, in install, addr string) int {
	t.Helper()
	marker := sleepMarker()
	ctx, cancel := context.WithCancel(context.Background())
	done := postRun(ctx, addr, "exec sleep "+marker)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ppid(t, sandboxed(t, in, "sleep "+marker))
}

// ppid is the parent of pid.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	n, _ := strconv.Atoi(f[1])
	return n
}

// procLink reads the link /proc/<pid>/<name> (exe, ns/mnt, ...).
func procLink(t *testing.T, pid int, name string) string {
	t.Helper()
	to, err := os.Readlink(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// TestServeSandboxesAreLean: the daemon's sandboxes are built by the lean
// jaild, so that it, not jaild-server, is what libcontainer re-executes as
// their init (/proc/self/exe of the process that starts them). The
// sandbox's pid 1 is the command itself by the time it runs; its parent
// on the host is that process.
func TestServeSandboxesAreLean(t *testing.T) {
	for _, pool := range []string{"0", "1"} {
		t.Run("pool="+pool, func(t *testing.T) {
			in := newInstall(t)
			addr, _ := startServe(t, in, false, "--listen", "127.0.0.1:0", "--pool", pool)
			builder := sandboxBuilder(t, in, addr)
			lean, err := filepath.EvalSymlinks(jaildBin)
			if err != nil {
				t.Fatal(err)
			}
			if got := procLink(t, builder, "exe"); got != lean {
				t.Errorf("the sandbox was built by pid %d, running %s; want the lean %s", builder, got, lean)
			}
		})
	}
}

// TestServeWorkerMountNamespace: with the default workspace root, the
// worker runs in a mount namespace of its own, where the root template's
// host paths are bound once: its sandboxes see them, the host does not.
// With a workspace root of the operator's, mounted where the front end
// reads it by path, the worker keeps the front end's namespace.
func TestServeWorkerMountNamespace(t *testing.T) {
	for _, ownRoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("workspace root given=%v", ownRoot), func(t *testing.T) {
			in := newInstall(t)
			args := []string{"--listen", "127.0.0.1:0"}
			if ownRoot {
				args = append(args, "--workspace-root", in.WithWorkspaceRoot(t))
			}
			addr, _ := startServe(t, in, false, args...)
			worker := sandboxBuilder(t, in, addr)
			own, front := procLink(t, worker, "ns/mnt"), procLink(t, ppid(t, worker), "ns/mnt")
			if (own == front) != ownRoot {
				t.Errorf("worker's mount namespace %s, front end's %s: want them %s", own, front, map[bool]string{false: "apart", true: "the same"}[ownRoot])
			}
			inWorker := testenv.MountsBelow(worker, in.StateDir)
			bound := slices.ContainsFunc(inWorker, func(p string) bool { return strings.HasSuffix(p, "/usr") })
			if bound == ownRoot {
				t.Errorf("the template's /usr bound in the worker's namespace: %v, want %v (mounts under the state dir there: %v)", bound, !ownRoot, inWorker)
			}
			if !ownRoot {
				if ms := testenv.MountsBelow(os.Getpid(), in.StateDir); len(ms) > 0 {
					t.Errorf("the host's namespace sees mounts under the state dir: %v", ms)
				}
			}
		})
	}
}

// TestServeKilledFrontEndKillsWorker SIGKILLs jaild-server while a
// sandbox runs: its worker sees the control connection close, kills and
// removes every sandbox and exits, and nothing is left on the host.
func TestServeKilledFrontEndKillsWorker(t *testing.T) {
	in := newInstall(t)
	cmd := in.cmd("serve", "--log-format", "json", "--pool", "1", "--audit-log", "off", "--listen", "127.0.0.1:0")
	log := &serveLog{listening: make(chan string, 1)}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var addr string
	select {
	case addr = <-log.listening:
	case err := <-exited:
		t.Fatalf("jaild serve exited before listening: %v\n%s", err, log)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("jaild serve did not listen\n%s", log)
	}
	marker := sleepMarker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := postRun(ctx, addr, "exec sleep "+marker)
	sleep := sandboxed(t, in, "sleep "+marker)
	worker := ppid(t, sleep)
	if worker == cmd.Process.Pid {
		t.Fatalf("the sandbox was built by jaild serve (pid %d) itself, not by a worker", worker)
	}
	if ppid(t, worker) != cmd.Process.Pid {
		t.Fatalf("the sandbox's builder (pid %d) is not a child of jaild serve (pid %d)", worker, cmd.Process.Pid)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	if r := <-done; !strings.HasPrefix(r, "error:") {
		t.Errorf("the request to the killed daemon got an answer: %s", r)
	}
	killed := time.Now()
	for running(worker) || running(sleep) {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("worker (pid %d, running %v) or sleep (pid %d, running %v) still there %v after jaild serve was killed",
				worker, running(worker), sleep, running(sleep), time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("worker and sandbox gone %v after the front end", time.Since(killed).Round(time.Millisecond))
	if strings.Contains(log.String(), `"level":"ERROR"`) {
		t.Errorf("the worker logged errors:\n%s", log)
	}
	// testenv's check at cleanup: no cgroup, state, slot or watchdog left.
}

// TestServeRestartsWorker SIGKILLs the worker mid-run: the run fails with
// an error that says so, and the daemon starts another worker that serves
// the next runs.
func TestServeRestartsWorker(t *testing.T) {
	in := newInstall(t)
	addr, log := startServe(t, in, false, "--listen", "127.0.0.1:0")
	marker := sleepMarker()
	done := postRun(context.Background(), addr, "exec sleep "+marker)
	sleep := sandboxed(t, in, "sleep "+marker)
	worker := ppid(t, sleep)
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !strings.HasPrefix(r, "500 ") {
		t.Errorf("the run of a killed worker answered %s; want a 500", r)
	}
	log.waitFor(t, "jaild worker died: it exited (signal: killed) before it could read the result")
	var (
		last    string
		refused int
	)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if last = <-postRun(context.Background(), addr, "echo back"); strings.HasPrefix(last, "200 ") && strings.Contains(last, `"stdout":"back\n"`) {
			break
		}
		// Until the new worker serves, a request is told to come back.
		refused++
		if !strings.HasPrefix(last, "503 ") || !strings.Contains(last, `"code":"unavailable"`) {
			t.Errorf("a run while the worker restarts answered %s; want a 503 unavailable", last)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run succeeds after the worker was killed; last: %s", last)
		}
	}
	t.Logf("%d runs refused while the worker restarted", refused)
	log.waitFor(t, "jaild worker restarted")
	// The killed worker's watchdog removes its sandboxes; testenv checks.
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sleep (pid %d) of the killed worker still runs", sleep)
		}
	}
}
