package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metricValue reads one unlabelled metric from addr's /metrics; -1 if
// it is not there.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// TestServeQueuedRunsWaitForNewWorker: when the worker dies, the run it
// held fails (its command may have run: it is never run again), while the
// runs still queued, never handed to it, wait for the worker that replaces
// it and run there. A run whose queue deadline passes before any worker
// serves gets the usual answer of a full queue, 429.
func TestServeQueuedRunsWaitForNewWorker(t *testing.T) {
	in := newInstall(t)
	addr, log := startServe(t, in, false, "--listen", "127.0.0.1:0",
		"--max-concurrent", "1", "--queue", "8", "--queue-wait", "4s")

	marker := sleepMarker()
	held := postRun(context.Background(), addr, "exec sleep "+marker)
	sleep := sandboxed(t, in, "sleep "+marker)
	worker := ppid(t, sleep)
	if got := serveWorker(t); got != worker {
		t.Fatalf("the sandbox's builder is pid %d, the daemon's worker %d", worker, got)
	}
	var queued []<-chan string
	for _, word := range []string{"one", "two"} {
		queued = append(queued, postRun(context.Background(), addr, "echo "+word))
	}
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, addr, "jaild_queue_depth") != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the runs were not queued: queue depth %v", metricValue(t, addr, "jaild_queue_depth"))
		}
	}
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-held; !strings.HasPrefix(r, "500 ") || !strings.Contains(r, "internal") {
		t.Errorf("the run the killed worker held answered %s; want a 500", r)
	}
	for i, word := range []string{"one", "two"} {
		if r := <-queued[i]; !strings.HasPrefix(r, "200 ") || !strings.Contains(r, `"stdout":"`+word+`\n"`) {
			t.Errorf("a run queued when the worker died answered %s; want it run by the next worker", r)
		}
	}
	log.waitFor(t, "jaild worker restarted")

	// No worker can start while its binary is away: a run waits out its
	// queue deadline and is told to come back.
	worker = serveWorker(t)
	away := jaildBin + ".away"
	if err := os.Rename(jaildBin, away); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.Rename(away, jaildBin); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(restore)
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A run sent before the daemon knows the worker is dead may be in
	// its socket when it dies: lost, not queued.
	for deadline := time.Now().Add(30 * time.Second); strings.Count(log.String(), "jaild worker exited; restarting it") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not see its worker die")
		}
	}
	start := time.Now()
	r := <-postRun(context.Background(), addr, "echo late")
	if !strings.HasPrefix(r, "429 ") || !strings.Contains(r, `"code":"busy"`) {
		t.Errorf("a run whose queue deadline passed while no worker could start answered %s; want a 429 busy", r)
	}
	if waited := time.Since(start); waited < 3*time.Second {
		t.Errorf("the run was refused after %v, before its queue deadline of 4s", waited)
	}
	restore()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if r = <-postRun(context.Background(), addr, "echo back"); strings.HasPrefix(r, "200 ") && strings.Contains(r, `"stdout":"back\n"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run succeeds once the worker can start again; last: %s", r)
		}
	}
}
