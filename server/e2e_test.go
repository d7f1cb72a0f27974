package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/server"
)

// TestE2E drives a real `jaild serve`, built from this tree, with plain HTTP
// and `jaild remote`, running real sandboxes. It needs root.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	t.Run("tcp", func(t *testing.T) { testE2ETCP(t, bin) })
	t.Run("unix socket", func(t *testing.T) { testE2EUnix(t, bin) })
	t.Run("disconnect kills the sandbox", func(t *testing.T) { testE2EDisconnect(t, bin) })
	t.Run("SIGTERM with 20 running lets them finish", func(t *testing.T) { testE2ESigtermFinish(t, bin) })
	t.Run("SIGTERM with 20 running kills them after the grace period", func(t *testing.T) { testE2ESigtermKill(t, bin) })
	t.Run("SIGKILL, the watchdog tears the sandboxes down", func(t *testing.T) { testE2ESigkillWatchdog(t, bin) })
	t.Run("SIGKILL with the watchdog, restart sweeps the orphans", func(t *testing.T) { testE2ESigkill(t, bin) })
	t.Run("refuses to serve off loopback without tokens", func(t *testing.T) { testE2ERefuse(t, bin) })
	t.Run("big outputs stay within the output memory", func(t *testing.T) { testE2EOutputMemory(t, bin) })
}

// testE2EOutputMemory: 8 concurrent requests that each keep 2x16 MiB of
// arbitrary bytes (256 MiB in all) go through the default 64 MiB of output
// memory, so the daemon's peak stays within its idle RSS plus twice that
// (Go's collector lets the heap reach twice what is live) and a margin,
// and it gives the memory back afterwards. Each answer is complete and
// exact in size.
func testE2EOutputMemory(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serve(t, "--pool", "0", "--queue-wait", "2m", "--audit-log", "off")
	const n, size, outputMemory = 8, 16 << 20, 64 << 20
	idle := procStatusKB(t, d.cmd.Process.Pid, "VmRSS")
	body := fmt.Sprintf(`{"command":"head -c %d /dev/urandom; head -c %d /dev/urandom >&2","max_output_bytes":%d,"timeout_seconds":120}`, size+4096, size+4096, size)
	// The runs go two at a time through the default 64 MiB of output
	// memory: longer than the shared client's timeout on a busy machine.
	long := &http.Client{Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := long.Post(d.url+"/run", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var res api.Response
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
				t.Errorf("status %d: %v", resp.StatusCode, err)
				return
			}
			if len(res.StdoutB64) != size || len(res.StderrB64) != size || !res.StdoutTruncated {
				t.Errorf("kept %d and %d bytes, want %d each", len(res.StdoutB64), len(res.StderrB64), size)
			}
		}()
	}
	wg.Wait()
	pid := d.cmd.Process.Pid
	peak := procStatusKB(t, pid, "VmHWM")
	if bound := idle + (2*outputMemory+32<<20)>>10; peak > bound {
		t.Errorf("daemon peak RSS %d KiB, want < %d KiB (%d idle, twice the output memory, 32 MiB)", peak, bound, idle)
	}
	deadline := time.Now().Add(patience)
	for procStatusKB(t, pid, "VmRSS") > 60<<10 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	rss := procStatusKB(t, pid, "VmRSS")
	if rss > 60<<10 {
		t.Errorf("daemon RSS %d KiB after the runs, want < 60 MiB", rss)
	}
	t.Logf("daemon RSS: %d MiB idle, peak %d MiB, %d MiB after", idle>>10, peak>>10, rss>>10)
}

// procStatusKB reads a "kB" field of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// buildJaild builds the binary into the test's temp dir.
func buildJaild(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BuildJaild(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// e2eInstall is a private jaild installation: its own state dir and parent
// cgroup, checked for leftovers when the test ends (after its daemons).
type e2eInstall struct {
	*testenv.Install
	bin    string
	marker string // unique per install, for finding its processes
	// wrap, if set, is the command serve runs jaild under (nsenter into
	// a network namespace): it must exec jaild in its own process.
	wrap []string
}

func newE2EInstall(t *testing.T, bin string) *e2eInstall {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	in := &e2eInstall{Install: testenv.New(t, "jaild-server-e2e"), bin: bin}
	// A sleep duration no other process on the host will have.
	in.marker = fmt.Sprintf("%d.%d", 300+int(b[0]), 1000+int(b[1])*10+int(b[2]%10))
	t.Cleanup(func() {
		// Last resort, so that a failed test leaves nothing running:
		// these processes were started by this test's daemons. (This
		// runs before testenv's leftover check.)
		for _, pid := range pidsWith(in.marker) {
			t.Errorf("sandbox process %d (%s) left behind; killing it", pid, in.marker)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return in
}

// pidsWith lists the processes whose command line contains s.
func pidsWith(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// env is the whole environment of the jaild processes: nothing of the
// test runner's JAILD_* settings leaks in.
func (in *e2eInstall) env() []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, in.Install.Env()...)
}

type daemon struct {
	cmd    *exec.Cmd
	addr   string // host:port or socket path
	url    string // base URL, for TCP
	exited chan error
	log    *syncBuffer
}

// lineWriter passes each complete line to fn.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(line []byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// serve starts `jaild serve ARGS` and waits until it listens. The daemon is
// stopped (SIGTERM, then SIGKILL) when the test ends, if it still runs.
func (in *e2eInstall) serve(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{exited: make(chan error, 1), log: &syncBuffer{}}
	listening := make(chan string, 1)
	full := append([]string{"serve", "--log-format", "json"}, args...)
	if !slicesContains(args, "--socket") && !slicesContains(args, "--listen") {
		full = append(full, "--listen", "127.0.0.1:0")
	}
	d.cmd = exec.Command(in.bin, full...)
	if in.wrap != nil {
		d.cmd = exec.Command(in.wrap[0], append(append(in.wrap[1:len(in.wrap):len(in.wrap)], in.bin), full...)...)
	}
	d.cmd.Env = in.env()
	var notJSON syncBuffer
	d.cmd.Stderr = &lineWriter{fn: func(line []byte) {
		d.log.Write(append(append([]byte(nil), line...), '\n'))
		var m struct{ Msg, Addr string }
		if json.Unmarshal(line, &m) != nil && bytes.HasPrefix(line, []byte("time=")) {
			notJSON.Write(append(append([]byte(nil), line...), '\n'))
		}
		if json.Unmarshal(line, &m) == nil && m.Msg == "listening" {
			select {
			case listening <- m.Addr:
			default:
			}
		}
	}}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start jaild serve: %v", err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-d.exited:
			d.exited <- err
			return
		default:
		}
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.exited:
			d.exited <- err
		case <-time.After(patience):
			t.Errorf("jaild serve did not stop on SIGTERM; killing it")
			d.cmd.Process.Kill()
			<-d.exited
		}
		// --log-format json holds for every logger of the daemon.
		if b := notJSON.Bytes(); len(b) > 0 {
			t.Errorf("jaild serve --log-format json wrote text lines:\n%s", b)
		}
		if t.Failed() {
			t.Logf("jaild serve log:\n%s", d.log.Bytes())
		}
	})
	select {
	case d.addr = <-listening:
	case err := <-d.exited:
		d.exited <- err
		t.Fatalf("jaild serve exited before listening: %v\n%s", err, d.log.Bytes())
	case <-time.After(patience):
		t.Fatalf("jaild serve did not listen\n%s", d.log.Bytes())
	}
	d.url = "http://" + d.addr
	return d
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// stop signals the daemon and returns its exit error.
func (d *daemon) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	d.cmd.Process.Signal(sig)
	err := server.Recv(t, d.exited, "jaild serve to exit")
	d.exited <- err
	return err
}

// remote runs `jaild remote ARGS` with stdin.
func (in *e2eInstall) remote(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(in.bin, append([]string{"remote"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("jaild remote: %v", err)
	}
	return code, out.String(), errb.String()
}

func testE2ETCP(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, token := testenv.TokenFile(t, "e2e-agent")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := in.serve(t, "--token-file", tokens, "--audit-log", auditPath, "--max-memory", "512M")
	auth := []string{"Authorization", "Bearer " + token}

	if resp, body := get(t, d.url+"/healthz"); resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"jail":"ok"`)) {
		t.Fatalf("/healthz: %d %s", resp.StatusCode, body)
	}
	if resp, _ := post(t, d.url+"/run", `{"command":"id"}`); resp.StatusCode != 401 {
		t.Fatalf("/run without a token: %d", resp.StatusCode)
	}

	resp, body := post(t, d.url+"/run", `{"command":"echo hi; id -u; echo err >&2; exit 3","timeout_seconds":5}`, auth...)
	var r api.Response
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/run: %d %s", resp.StatusCode, body)
	}
	if r.Stdout != "hi\n1000\n" || r.Stderr != "err\n" || r.ExitCode != 3 || r.ID == "" || r.DurationMS <= 0 {
		t.Errorf("/run result %+v", r)
	}
	resp, body = post(t, d.url+"/run", `{"executable":"cat","stdin_b64":"AP8K","env":{"X":"y"}}`, auth...)
	// Output that is not UTF-8 comes back exactly, in base64.
	var got api.Response
	if json.Unmarshal(body, &got); resp.StatusCode != 200 || got.Stdout != "" || string(got.StdoutB64) != "\x00\xff\n" {
		t.Errorf("/run with binary stdin: %d %q %q", resp.StatusCode, got.Stdout, got.StdoutB64)
	}
	resp, body = post(t, d.url+"/run", `{"command":"true","memory_bytes":1073741824}`, auth...)
	if e := decodeError(t, body); resp.StatusCode != 400 || e.Field != "memory_bytes" {
		t.Errorf("memory above the daemon's maximum: %d %+v", resp.StatusCode, e)
	}

	resp, body = post(t, d.url+"/raw", `{"executable":"sh","args":["-c","echo out; echo err >&2; exit 4"]}`, auth...)
	evs := events(t, body)
	var out, errs string
	for _, ev := range evs {
		switch ev.Event {
		case api.EventStdout:
			out += string(ev.Data)
		case api.EventStderr:
			errs += string(ev.Data)
		}
	}
	last := evs[len(evs)-1]
	if resp.StatusCode != 200 || evs[0].Event != api.EventStart || out != "out\n" || errs != "err\n" ||
		last.Event != api.EventExit || *last.ExitCode != 4 {
		t.Errorf("/raw: %d %s", resp.StatusCode, body)
	}

	remote := []string{"--server", d.url, "--token-file", tokens}
	tests := []struct {
		name     string
		stdin    string
		args     []string
		code     int
		stdout   string
		inStderr string
	}{
		{name: "exit code and stdin", stdin: "qwerty-stdin", args: []string{"--", "sh", "-c", "cat; echo; exit 5"}, code: 5, stdout: "qwerty-stdin\n"},
		{name: "shell", args: []string{"--shell", "echo $0 $X", "-e", "X=1"}, stdout: "/bin/sh 1\n"},
		{name: "keep env", args: []string{"--keep-env", "PATH", "--", "sh", "-c", "echo $PATH"}, stdout: "/usr/bin:/bin\n"},
		{name: "timeout", args: []string{"--timeout", "500ms", "--shell", "echo partial; sleep " + in.marker}, code: 124, stdout: "partial\n"},
		{name: "oom", args: []string{"--memory", "32M", "--", "tail", "/dev/zero"}, code: 123},
		// Nested: the command itself is its pid namespace's init, which
		// SIGKILL from inside cannot kill.
		{name: "signal", args: []string{"--shell", "sh -c 'kill -KILL $$'"}, code: 137},
		{name: "not found", args: []string{"--", "no-such-command"}, code: 127, inStderr: "not found"},
		{name: "not executable", args: []string{"--", "/etc/passwd"}, code: 126},
		{name: "above the maximum", args: []string{"--memory", "1G", "--", "true"}, code: 125, inStderr: "exceeds the maximum"},
		{name: "json", args: []string{"--json", "--", "echo", "j"}, stdout: "\"stdout\": \"j\\n\""},
	}
	for _, tt := range tests {
		t.Run("remote "+tt.name, func(t *testing.T) {
			code, stdout, stderr := in.remote(t, tt.stdin, append(append([]string{}, remote...), tt.args...)...)
			if code != tt.code || (tt.stdout != "" && !strings.Contains(stdout, tt.stdout)) || !strings.Contains(stderr, tt.inStderr) {
				t.Errorf("exit %d stdout %q stderr %q; want exit %d stdout %q stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.inStderr)
			}
		})
	}
	t.Run("remote without token", func(t *testing.T) {
		code, _, stderr := in.remote(t, "", "--server", d.url, "--", "true")
		if code != 125 || !strings.Contains(stderr, "401") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	_, metrics := get(t, d.url+"/metrics", auth...)
	for _, want := range []string{`jaild_runs_total{verdict="ok"}`, `jaild_runs_total{verdict="timed_out"} 1`, `jaild_runs_total{verdict="oom_killed"} 1`,
		"jaild_sandboxes_running 0", "jaild_queue_depth 0", `jaild_requests_rejected_total{reason="unauthorized"} 2`, "jaild_run_duration_seconds_bucket"} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v\n%s", err, d.log.Bytes())
	}
	fi, err := os.Stat(auditPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit log: %v %v", err, fi)
	}
	data, _ := os.ReadFile(auditPath)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	// 4 runs over HTTP and 10 remote runs, each with one refused by the
	// maxima (audited as invalid), and the two requests without a token
	// (audited as rejected, with the peer as caller).
	count := map[string]int{}
	for _, l := range lines {
		var rec api.AuditRecord
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("audit line %s: %v", l, err)
		}
		switch rec.Verdict {
		case api.VerdictRejected:
			count["rejected"]++
			if rec.Reason != "unauthorized" || rec.Status != 401 || !strings.HasPrefix(rec.Caller, "127.0.0.1:") || rec.RequestID == "" {
				t.Errorf("audit line %s", l)
			}
		case api.VerdictInvalid:
			count["invalid"]++
			if rec.Caller != "e2e-agent" || len(rec.CommandSHA256) != 64 || rec.Error == "" {
				t.Errorf("audit line %s", l)
			}
		default:
			count["run"]++
			if rec.Caller != "e2e-agent" || len(rec.CommandSHA256) != 64 {
				t.Errorf("audit line %s", l)
			}
		}
		if bytes.Contains(l, []byte("partial")) || bytes.Contains(l, []byte("qwerty")) {
			t.Errorf("audit line holds output or stdin: %s", l)
		}
	}
	if count["run"] != 3+9 || count["invalid"] != 2 || count["rejected"] != 2 {
		t.Errorf("audit log has %v, want 12 runs, 2 invalid, 2 rejected:\n%s", count, data)
	}
}

func testE2EUnix(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	sock := filepath.Join(t.TempDir(), "jaild.sock")
	d := in.serve(t, "--socket", sock, "--socket-group", "daemon", "--audit-log", "off")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket || st.Uid != 0 || st.Gid != 1 {
		t.Errorf("socket mode %v uid %d gid %d, want 0660 root:daemon(1)", fi.Mode(), st.Uid, st.Gid)
	}
	code, stdout, stderr := in.remote(t, "", "--socket", sock, "--", "echo", "over the socket")
	if code != 0 || stdout != "over the socket\n" {
		t.Errorf("remote over the socket: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	c, err := client.New(client.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	ev, err := c.Raw(context.Background(), &api.Request{Command: "echo a; echo b >&2"}, &so, &se)
	if err != nil || so.String() != "a\n" || se.String() != "b\n" || *ev.ExitCode != 0 {
		t.Errorf("Raw over the socket: %v %q %q", err, so.String(), se.String())
	}
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left behind: %v", err)
	}
}

// testE2EDisconnect: output of a real sandbox reaches the client while it
// runs, and hanging up kills it.
func testE2EDisconnect(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serve(t, "--audit-log", "off")
	body := fmt.Sprintf(`{"command":"echo first; sleep %s; echo never","timeout_seconds":120}`, in.marker)
	req, _ := http.NewRequest("POST", d.url+"/raw", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	readEvent(t, br) // start
	if ev := readEvent(t, br); ev.Event != api.EventStdout || string(ev.Data) != "first\n" {
		t.Fatalf("first output event %+v", ev)
	}
	// The sandbox still runs (sh and its sleep): its output came while
	// it did.
	if pids := pidsWith(in.marker); len(pids) == 0 {
		t.Fatal("no sandbox process running after the first output")
	}
	cancel() // hang up
	eventually(t, "the sandbox to be killed", func() bool { return len(pidsWith(in.marker)) == 0 })
	eventually(t, "the run to be counted as canceled", func() bool {
		_, m := get(t, d.url+"/metrics")
		return bytes.Contains(m, []byte(`jaild_runs_total{verdict="canceled"} 1`))
	})
}

// start20 starts 20 runs of cmd at once and waits until all 20 sandboxes
// run.
func start20(t *testing.T, d *daemon, cmd string) []<-chan answer {
	t.Helper()
	var answers []<-chan answer
	for range 20 {
		answers = append(answers, postAsync(t, d.url+"/run", fmt.Sprintf(`{"command":%q,"timeout_seconds":300}`, cmd)))
	}
	eventually(t, "20 sandboxes running", func() bool {
		_, m := get(t, d.url+"/metrics")
		return bytes.Contains(m, []byte("jaild_sandboxes_running 20\n"))
	})
	return answers
}

func testE2ESigtermFinish(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serve(t, "--max-concurrent", "20", "--grace", "5m", "--audit-log", "off")
	// Long enough that all 20 still run when the signal comes, unless
	// they start very slowly.
	answers := start20(t, d, "sleep 8; echo finished")
	d.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", d.addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	for i, c := range answers {
		a := server.Recv(t, c, "a run's answer")
		var r api.Response
		if a.err != nil || a.status != 200 || json.Unmarshal(a.body, &r) != nil || r.Stdout != "finished\n" || r.ExitCode != 0 {
			t.Errorf("run %d: status %d err %v body %s", i, a.status, a.err, a.body)
		}
	}
	if err := server.Recv(t, d.exited, "jaild serve to exit"); err != nil {
		t.Errorf("jaild serve exit: %v\n%s", err, d.log.Bytes())
	}
	d.exited <- nil
}

func testE2ESigtermKill(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serve(t, "--max-concurrent", "20", "--grace", "1s", "--audit-log", "off")
	answers := start20(t, d, "sleep "+in.marker)
	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v\n%s", err, d.log.Bytes())
	}
	for i, c := range answers {
		a := server.Recv(t, c, "a run's answer")
		if a.err != nil || a.status != 503 || decodeError(t, a.body).Code != api.CodeShuttingDown {
			t.Errorf("run %d: status %d err %v body %s", i, a.status, a.err, a.body)
		}
	}
	// jaild exits only after its sandboxes are gone.
	if pids := pidsWith(in.marker); len(pids) > 0 {
		t.Errorf("sandbox processes %v still there after jaild exited", pids)
	}
}

// serveThreeSleeps starts a daemon with three long sandboxes running, their
// commands marked with the installation's marker.
func (in *e2eInstall) serveThreeSleeps(t *testing.T) *daemon {
	t.Helper()
	d := in.serve(t, "--audit-log", "off")
	for range 3 {
		postAsync(t, d.url+"/raw", `{"command":"sleep `+in.marker+`","timeout_seconds":600}`)
	}
	eventually(t, "3 sandboxes running", func() bool {
		_, m := get(t, d.url+"/metrics")
		return bytes.Contains(m, []byte("jaild_sandboxes_running 3\n"))
	})
	// The metric counts a run once admitted, before the worker has built
	// its sandbox: wait for the three sleeps themselves.
	eventually(t, "3 sandboxed commands started", func() bool {
		n := 0
		for _, pid := range pidsWith(in.marker) {
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.HasPrefix(cmdline, []byte("sleep\x00")) {
				n++
			}
		}
		return n == 3
	})
	return d
}

// testE2ESigkillWatchdog: a daemon killed outright has its sandboxes, pooled
// ones included, torn down at once by its watchdog.
func testE2ESigkillWatchdog(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serveThreeSleeps(t)
	containers := filepath.Join(in.StateDir, "containers")
	// The runs are counted before the worker has built their sandboxes,
	// and the pool refills in the background after the three runs took
	// its sandboxes: wait for all, so that the kill covers a pooled one.
	eventually(t, "3 running containers and a pooled one", func() bool { return len(dirNames(containers)) >= 4 })
	d.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	eventually(t, "the orphans' processes to die", func() bool { return len(pidsWith(in.marker)) == 0 })
	if took := time.Since(killed); took > 2*time.Second {
		t.Errorf("the orphans' processes died %v after jaild serve", took)
	}
	eventually(t, "the orphans' state to go", func() bool { return len(dirNames(containers)) == 0 })
	// It has exited, but the watchdog held its stderr until done.
	d.exited <- server.Recv(t, d.exited, "jaild serve to exit")
}

// parentOf is pid's parent pid, or 0.
func parentOf(pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// testE2ESigkill: a daemon killed outright together with its worker and
// the worker's watchdog leaves its sandboxes behind; the next daemon on the
// same state dir sweeps them before serving.
func testE2ESigkill(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	d := in.serveThreeSleeps(t)
	dogs := testenv.Watchdogs(in.StateDir)
	if len(dogs) != 1 {
		t.Fatalf("watchdogs %v, want the daemon's one", dogs)
	}
	// The worker that builds the sandboxes cleans up when the front end
	// dies: it goes too, with its watchdog.
	// The daemon's own child: a process the worker is forking (for a pool
	// refill) shows the worker's command line too for a moment.
	var worker []int
	for _, pid := range pidsWith(in.StateDir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("\x00worker\x00")) && parentOf(pid) == d.cmd.Process.Pid {
			worker = append(worker, pid)
		}
	}
	if len(worker) != 1 {
		t.Fatalf("worker processes %v, want the daemon's one", worker)
	}
	// Stopped first, so that they cannot sweep before they die.
	syscall.Kill(dogs[0], syscall.SIGSTOP)
	syscall.Kill(worker[0], syscall.SIGSTOP)
	d.cmd.Process.Signal(syscall.SIGKILL)
	syscall.Kill(worker[0], syscall.SIGKILL)
	syscall.Kill(dogs[0], syscall.SIGKILL)
	err := server.Recv(t, d.exited, "jaild serve to exit")
	d.exited <- err
	if err == nil {
		t.Fatal("jaild serve exited 0 on SIGKILL")
	}
	orphans := dirNames(filepath.Join(in.StateDir, "containers"))
	t.Logf("after SIGKILL: %d sandbox processes, %d containers' state (pooled ones included)", len(pidsWith(in.marker)), len(orphans))
	if len(orphans) < 3 {
		t.Fatalf("only %d containers' state after SIGKILL; the test would prove nothing", len(orphans))
	}

	d2 := in.serve(t, "--audit-log", "off") // sweeps before it listens
	if pids := pidsWith(in.marker); len(pids) > 0 {
		t.Errorf("orphaned sandbox processes %v survived the restart", pids)
	}
	// The new daemon starts pooled sandboxes of its own at once: look for
	// the dead one's by name.
	for _, id := range orphans {
		if _, err := os.Stat(filepath.Join(in.StateDir, "containers", id)); err == nil {
			t.Errorf("orphaned container %s survived the restart", id)
		}
	}
	code, stdout, _ := in.remote(t, "", "--server", d2.url, "--", "echo", "alive")
	if code != 0 || stdout != "alive\n" {
		t.Errorf("after the restart: exit %d stdout %q", code, stdout)
	}
	if err := d2.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
}

func dirNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// testE2ERefuse: the daemon refuses configurations that would expose it.
func testE2ERefuse(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	open := filepath.Join(t.TempDir(), "open-tokens")
	os.WriteFile(open, []byte("a:0123456789abcdef\n"), 0o644)
	cfg := filepath.Join(t.TempDir(), "jaild.conf")
	os.WriteFile(cfg, []byte("# test\nmax-memory = 64M\nlisten = \"0.0.0.0:0\"\n"), 0o600)
	badCfg := filepath.Join(t.TempDir(), "bad.conf")
	os.WriteFile(badCfg, []byte("no-such-setting = 1\n"), 0o600)
	tests := []struct {
		name  string
		args  []string
		env   []string
		error string
	}{
		{name: "all interfaces", args: []string{"--listen", "0.0.0.0:0"}, error: "not a loopback address"},
		{name: "all interfaces from MCP_BIND_ADDR", env: []string{"MCP_BIND_ADDR=0.0.0.0:0"}, error: "not a loopback address"},
		{name: "all interfaces from the config file", args: []string{"--config", cfg}, error: "not a loopback address"},
		{name: "unknown config setting", args: []string{"--config", badCfg}, error: "unknown setting"},
		{name: "token file open to others", args: []string{"--token-file", open}, error: "other users"},
		{name: "listen and socket", args: []string{"--listen", "127.0.0.1:0", "--socket", "/tmp/x.sock"}, error: "not both"},
		{name: "bad maximum", args: []string{"--max-memory", "1K"}, error: "memory"},
		{name: "arguments", args: []string{"extra"}, error: "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(in.bin, append([]string{"serve"}, tt.args...)...)
			cmd.Env = append(in.env(), tt.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(out), tt.error) {
				t.Errorf("jaild serve: %v, output %q; want exit 125 and %q", err, out, tt.error)
			}
		})
	}

	// The config file applies where neither a flag nor the environment
	// says otherwise.
	tokens, token := testenv.TokenFile(t, "e2e-agent")
	d := in.serve(t, "--config", cfg, "--listen", "127.0.0.1:0", "--token-file", tokens, "--audit-log", "off")
	resp, body := post(t, d.url+"/run", `{"command":"true","memory_bytes":134217728}`, "Authorization", "Bearer "+token)
	if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Error, "67108864") {
		t.Errorf("max-memory from the config file: %d %s", resp.StatusCode, body)
	}
}
