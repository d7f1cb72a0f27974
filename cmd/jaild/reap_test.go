package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStat is the state and parent of a process, from /proc/PID/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// childrenOf returns the processes whose parent is pid, and those of them
// that are zombies (exited, never waited for).
func childrenOf(pid int) (children, zombies []int) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		n, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if state, pp, ok := procStat(n); ok && pp == pid {
			children = append(children, n)
			if state == "Z" {
				zombies = append(zombies, n)
			}
		}
	}
	return children, zombies
}

// serveWorker returns the pid of the worker of the one jaild serve this
// test started: the child of a child of this process running the lean
// jaild.
func serveWorker(t *testing.T) int {
	t.Helper()
	lean, err := filepath.EvalSymlinks(jaildBin)
	if err != nil {
		t.Fatal(err)
	}
	var workers []int
	daemons, _ := childrenOf(os.Getpid())
	for _, d := range daemons {
		kids, _ := childrenOf(d)
		for _, k := range kids {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", k)); exe == lean {
				workers = append(workers, k)
			}
		}
	}
	if len(workers) != 1 {
		t.Fatalf("want one worker among this test's daemons' children, found %v", workers)
	}
	return workers[0]
}

// TestServeReapsSandboxes: sandboxes that end without a command (a
// session's prestarted one at DELETE, or after a missing directory, a
// pooled one after a missing executable) leave no zombie to the worker
// that started them. Each would keep a pid of the daemon's pids budget: 60
// sessions on a budget of 40 would leave no pid for any run.
func TestServeReapsSandboxes(t *testing.T) {
	in := newInstall(t)
	addr, _ := startServe(t, in, false, "--listen", "127.0.0.1:0", "--pool", "1", "--total-pids", "40")
	base := "http://" + addr
	do := func(method, path, body string) (int, string) {
		t.Helper()
		return request(t, base, method, path, body)
	}
	const cycles = 60
	for i := range cycles {
		code, body := do("POST", "/sessions", `{}`)
		if code != http.StatusCreated {
			t.Fatalf("cycle %d: POST /sessions: %d %s", i, code, body)
		}
		_, rest, _ := strings.Cut(body, `"id":"`)
		id, _, _ := strings.Cut(rest, `"`)
		if i%10 == 0 {
			// The prestarted sandbox cannot enter the directory: a
			// fresh one runs the call.
			if code, body := do("POST", "/run", fmt.Sprintf(`{"session_id":%q,"cwd":"/work/no/such","command":"pwd"}`, id)); code != 200 || !strings.Contains(body, `"stdout":"/work/no/such\n"`) {
				t.Fatalf("cycle %d: a call in a missing directory: %d %s", i, code, body)
			}
			if code, body := do("POST", "/run", `{"executable":"no-such-command"}`); code == 200 || code >= 500 {
				t.Fatalf("cycle %d: a run of a missing executable: %d %s", i, code, body)
			}
		}
		if code, body := do("DELETE", "/sessions/"+id, ""); code != http.StatusNoContent && code != http.StatusOK {
			t.Fatalf("cycle %d: DELETE /sessions/%s: %d %s", i, id, code, body)
		}
	}
	if code, body := do("POST", "/run", `{"command":"echo ok"}`); code != 200 || !strings.Contains(body, `"stdout":"ok\n"`) {
		t.Errorf("a run after %d sessions on a budget of 40 pids: %d %s", cycles, code, body)
	}
	worker := serveWorker(t)
	var zombies []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, zombies = childrenOf(worker); len(zombies) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(zombies) > 0 {
		t.Errorf("the worker (pid %d) has %d zombie children: %v", worker, len(zombies), zombies)
	}
}
