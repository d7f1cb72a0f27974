package jail_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

func run(t *testing.T, m *jail.Manager, spec *jail.Spec) *box.Result {
	t.Helper()
	res, err := m.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Args, err)
	}
	return res
}

func sh(script string) *jail.Spec {
	return &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", script}}}
}

func TestBehaviour(t *testing.T) {
	m := newManager(t)
	tests := []struct {
		name       string
		spec       *jail.Spec
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{name: "echo argv", spec: &jail.Spec{Command: box.Command{Args: []string{"echo", "hello", "world"}}}, wantOut: "hello world\n"},
		{name: "argv is not a shell", spec: &jail.Spec{Command: box.Command{Args: []string{"echo", "$HOME", ";", "id"}}}, wantOut: "$HOME ; id\n"},
		{name: "shell string", spec: sh("echo $HOME; echo err >&2"), wantOut: "/work\n", wantErrOut: "err\n"},
		{name: "exit code", spec: sh("exit 42"), wantCode: 42},
		{name: "stdin", spec: &jail.Spec{Command: box.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("quiet\n")}}, wantOut: "QUIET\n"},
		{name: "no stdin is /dev/null", spec: sh("cat; echo done"), wantOut: "done\n"},
		{name: "env", spec: &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "echo $FOO $HOME"}, Env: []string{"FOO=bar", "HOME=/tmp"}}}, wantOut: "bar /tmp\n"},
		{name: "default cwd", spec: sh("pwd"), wantOut: "/work\n"},
		{name: "cwd", spec: &jail.Spec{Command: box.Command{Args: []string{"pwd"}, Dir: "/tmp"}}, wantOut: "/tmp\n"},
		{name: "work is writable by the user", spec: sh("echo x > /work/f && cat /work/f && stat -c %U /work"), wantOut: "x\nsandbox\n"},
		{name: "killed by signal", spec: sh("kill -9 $$; sleep 1; echo not-pid-1-anymore"), wantOut: "not-pid-1-anymore\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, m, tt.spec)
			if res.Stdout != tt.wantOut || res.ExitCode != tt.wantCode || (tt.wantErrOut != "" && res.Stderr != tt.wantErrOut) {
				t.Errorf("got exit %d stdout %q stderr %q; want exit %d stdout %q stderr %q",
					res.ExitCode, res.Stdout, res.Stderr, tt.wantCode, tt.wantOut, tt.wantErrOut)
			}
		})
	}
}

func TestSignalExit(t *testing.T) {
	m := newManager(t)
	// A child killed by a signal is reported by the shell as 128+N; the
	// command itself (pid 1) ignores SIGKILL from inside (pid_namespaces(7)).
	res := run(t, m, sh("sh -c 'kill -TERM $$'; echo $?"))
	if res.Stdout != "143\n" {
		t.Errorf("stdout %q, want 143", res.Stdout)
	}
}

func TestOutputCap(t *testing.T) {
	m := newManager(t)
	spec := sh("seq 1 200000; seq 1 50000 >&2")
	spec.MaxOutput = 1000
	res := run(t, m, spec)
	if !res.StdoutTruncated || !res.StderrTruncated {
		t.Fatalf("truncated = %v/%v, want both", res.StdoutTruncated, res.StderrTruncated)
	}
	want := int64(len(seqOutput(200000)))
	if res.StdoutBytes != want {
		t.Errorf("StdoutBytes = %d, want %d", res.StdoutBytes, want)
	}
	if !strings.HasPrefix(res.Stdout, "1\n2\n3\n") || !strings.HasSuffix(res.Stdout, "199999\n200000\n") {
		t.Errorf("head/tail not kept: %q", res.Stdout)
	}
	// The cap holds the marker too: 1000 bytes in all.
	if len(res.Stdout) != 1000 {
		t.Errorf("kept %d bytes, marker included; want 1000", len(res.Stdout))
	}
	marker := box.Elide(want - int64(1000-len(box.Elide(want))))
	if !strings.Contains(res.Stdout, marker) {
		t.Errorf("stdout lacks marker %q: %q", marker, res.Stdout)
	}

	// Under the cap nothing is marked.
	res = run(t, m, sh("seq 1 10"))
	if res.StdoutTruncated || res.Stdout != seqOutput(10) {
		t.Errorf("small output changed: %q truncated=%v", res.Stdout, res.StdoutTruncated)
	}
}

func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestNonUTF8Output(t *testing.T) {
	m := newManager(t)
	res := run(t, m, sh(`printf '\377\376ok\000end'`))
	if want := "\xff\xfeok\x00end"; res.Stdout != want {
		t.Errorf("stdout %q, want the raw bytes %q", res.Stdout, want)
	}
}

func TestLiveOutput(t *testing.T) {
	m := newManager(t)
	var mu sync.Mutex
	var live bytes.Buffer
	spec := sh("echo one; sleep 0.2; echo two")
	spec.Stdout = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return live.Write(p)
	})
	res := run(t, m, spec)
	if live.String() != "one\ntwo\n" || res.Stdout != "one\ntwo\n" {
		t.Errorf("live %q, result %q", live.String(), res.Stdout)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestBadInput(t *testing.T) {
	m := newManager(t)
	tests := []struct {
		name string
		spec *jail.Spec
		want error
	}{
		{name: "missing command", spec: &jail.Spec{}},
		{name: "NUL in arg", spec: &jail.Spec{Command: box.Command{Args: []string{"echo", "a\x00b"}}}},
		{name: "NUL in env", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Env: []string{"A=b\x00c"}}}},
		{name: "env without =", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Env: []string{"A"}}}},
		{name: "cwd outside", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Dir: "/etc"}}},
		{name: "cwd escape", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Dir: "/work/../etc"}}},
		{name: "relative cwd", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Dir: "work"}}},
		{name: "negative timeout", spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Timeout: -1}}},
		{name: "tiny memory", spec: &jail.Spec{Limits: box.Limits{Memory: 1000}, Command: box.Command{Args: []string{"true"}}}},
		{name: "negative pids", spec: &jail.Spec{Limits: box.Limits{Pids: -1}, Command: box.Command{Args: []string{"true"}}}},
		{name: "pids above the kernel's", spec: &jail.Spec{Limits: box.Limits{Pids: 1<<22 + 1}, Command: box.Command{Args: []string{"true"}}}},
		{name: "infinite cpus", spec: &jail.Spec{Limits: box.Limits{CPUs: math.Inf(1)}, Command: box.Command{Args: []string{"true"}}}},
		{name: "NaN cpus", spec: &jail.Spec{Limits: box.Limits{CPUs: math.NaN()}, Command: box.Command{Args: []string{"true"}}}},
		{name: "cpus overflowing the quota", spec: &jail.Spec{Limits: box.Limits{CPUs: 1e300}, Command: box.Command{Args: []string{"true"}}}},
		{name: "not found", spec: &jail.Spec{Command: box.Command{Args: []string{"no-such-command"}}}, want: box.ErrCommandNotFound},
		{name: "not executable", spec: &jail.Spec{Command: box.Command{Args: []string{"/etc/passwd"}}}, want: box.ErrNotExecutable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := m.Run(context.Background(), tt.spec)
			if err == nil {
				t.Fatalf("no error; result %+v", res)
			}
			if tt.want == nil && !box.IsInvalid(err) {
				t.Errorf("err = %v, want an *InvalidError", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMissingRootfs(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cfg := config(env)
	cfg.Rootfs = filepath.Join(env.StateDir, "nope")
	if _, err := jail.New(cfg); !errors.Is(err, box.ErrRootfs) {
		t.Fatalf("New with a missing rootfs: %v, want ErrRootfs", err)
	}
	// An existing dir without mount points is refused too.
	cfg.Rootfs = t.TempDir()
	if _, err := jail.New(cfg); !errors.Is(err, box.ErrRootfs) {
		t.Fatalf("New with an empty rootfs: %v, want ErrRootfs", err)
	}
}

func TestIsolation(t *testing.T) {
	m := newManager(t)
	canary := fmt.Sprintf("/root/jaild-canary-%s", randHex(4))
	if err := os.WriteFile(canary, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })
	t.Setenv("JAILD_TEST_SECRET", "leak")
	host, _ := os.Hostname()

	tests := []struct {
		name   string
		script string
		check  func(out string) bool
		want   string
	}{
		{"host pids invisible", "ls /proc | grep -c '^[0-9]'; test -e /proc/" + strconv.Itoa(os.Getpid()) + " && echo host-pid-visible",
			func(o string) bool { n, _ := strconv.Atoi(strings.TrimSpace(o)); return n > 0 && n < 5 }, "a handful of pids, none of the host's"},
		{"canary unreadable", "cat " + canary + " 2>&1; ls /root 2>&1; ls /home 2>&1",
			func(o string) bool { return !strings.Contains(o, "secret") }, "no canary content"},
		{"no shadow or host etc", "ls /etc", func(o string) bool {
			return !strings.Contains(o, "shadow") && !strings.Contains(o, "ssh") && strings.Contains(o, "passwd")
		}, "generated /etc only"},
		{"loopback only", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", func(o string) bool { return o == "lo\n" }, "lo"},
		{"no route out", "echo > /dev/tcp/192.0.2.1/80 && echo connected", func(o string) bool { return !strings.Contains(o, "connected") }, "connect fails"},
		{"uid mapping", "id -u; cat /proc/self/uid_map", func(o string) bool {
			f := strings.Fields(o)
			return len(f) == 4 && f[0] == "1000" && f[1] == "0" && f[2] != "0" && f[3] == "65536"
		}, "uid 1000, container root mapped to a non-root host range"},
		{"no capabilities", "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | awk '{print $2}' | sort -u",
			func(o string) bool { return o == "0000000000000000\n" }, "all capability sets empty"},
		{"no new privs", "grep NoNewPrivs /proc/self/status", func(o string) bool { return strings.Contains(o, "1") }, "NoNewPrivs 1"},
		{"seccomp on", "grep '^Seccomp:' /proc/self/status", func(o string) bool { return strings.Contains(o, "2") }, "filter mode"},
		{"read-only root", "touch /usr/x /etc/x /x 2>&1 | grep -c 'Read-only'", func(o string) bool { return o == "3\n" }, "3 read-only errors"},
		{"hostname", "hostname", func(o string) bool { return o == "jaild\n" && o != host+"\n" }, "jaild"},
		{"env not leaked", "env", func(o string) bool { return !strings.Contains(o, "JAILD_TEST_SECRET") }, "no daemon env"},
		{"no user namespaces", "unshare -Ur true 2>&1 || echo refused", func(o string) bool { return strings.Contains(o, "refused") }, "unshare refused"},
		{"no mount", "mount -t tmpfs x /tmp 2>&1 || echo refused", func(o string) bool { return strings.Contains(o, "refused") }, "mount refused"},
		// The masks under /sys that runc has are left out of the
		// configuration because no sysfs is mounted.
		{"no sysfs", "grep -c ' sysfs ' /proc/self/mounts; ls -A /sys 2>/dev/null | wc -l", func(o string) bool { return o == "0\n0\n" }, "no sysfs, no /sys"},
		{"proc masked", "for p in /proc/keys /proc/timer_list /proc/kcore /proc/sched_debug /proc/timer_stats /proc/latency_stats; do test -e $p && head -c 64 $p | wc -c; done; " +
			"for d in /proc/acpi /proc/asound /proc/scsi; do test -d $d && ls -A $d | wc -l; done; " +
			"for p in /proc/bus /proc/fs /proc/irq /proc/sys; do grep -c \" $p ro,\" /proc/self/mountinfo; done",
			func(o string) bool {
				f := strings.Fields(o)
				if len(f) < 4 || strings.Join(f[len(f)-4:], " ") != "1 1 1 1" {
					return false
				}
				for _, n := range f[:len(f)-4] {
					if n != "0" {
						return false
					}
				}
				return true
			}, "masked files and directories empty, /proc/bus, fs, irq and sys read-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, m, &jail.Spec{Command: box.Command{Args: []string{"/bin/bash", "-c", tt.script}}})
			if !tt.check(res.Stdout) {
				t.Errorf("stdout %q stderr %q; want %s", res.Stdout, res.Stderr, tt.want)
			}
		})
	}
	if data, err := os.ReadFile(canary); err != nil || string(data) != "secret" {
		t.Errorf("host canary changed: %q %v", data, err)
	}
}

func TestForkBomb(t *testing.T) {
	m := newManager(t)
	spec := &jail.Spec{
		Limits:  box.Limits{Pids: 64},
		Command: box.Command{Args: []string{"/bin/bash", "-c", ":(){ :|:& };:; sleep 100"}, Timeout: 3 * time.Second},
	}
	start := time.Now()
	res := run(t, m, spec)
	elapsed := time.Since(start)
	if !res.TimedOut || !res.PidsLimitHit {
		t.Errorf("TimedOut=%v PidsLimitHit=%v, want both", res.TimedOut, res.PidsLimitHit)
	}
	if elapsed > spec.Timeout+time.Second {
		t.Errorf("returned after %v, want within timeout + 1s", elapsed)
	}
}

func TestBusyLoopTimeout(t *testing.T) {
	m := newManager(t)
	spec := sh("echo partial; yes > /dev/null")
	spec.Timeout = time.Second
	res := run(t, m, spec)
	if !res.TimedOut || res.Stdout != "partial\n" {
		t.Errorf("TimedOut=%v stdout %q, want true and the partial output", res.TimedOut, res.Stdout)
	}
	if res.CPUTime < 100*time.Millisecond {
		t.Errorf("CPUTime %v: a busy loop should have used CPU", res.CPUTime)
	}
}

func TestOOM(t *testing.T) {
	m := newManager(t)
	spec := sh("tail /dev/zero; echo survived")
	spec.Limits.Memory = 32 << 20
	res := run(t, m, spec)
	if !res.OOMKilled {
		t.Errorf("OOMKilled = false; exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	if res.MemoryPeak < 16<<20 || res.MemoryPeak > 33<<20 {
		t.Errorf("MemoryPeak %d, want near the 32 MiB limit", res.MemoryPeak)
	}
}

func TestTmpfsFull(t *testing.T) {
	m := newManager(t)
	spec := sh("dd if=/dev/zero of=/work/fill bs=64k count=1000 2>&1; du -k /work/fill")
	spec.Limits.TmpfsSize = 1 << 20
	res := run(t, m, spec)
	if !strings.Contains(res.Stdout, "No space left on device") {
		t.Errorf("no ENOSPC: %q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "1024\t/work/fill") {
		t.Errorf("file not capped at 1 MiB: %q", res.Stdout)
	}
}

func TestRmRfRoot(t *testing.T) {
	m := newManager(t)
	// /usr on the host is what the sandbox sees most of; it must survive.
	before, err := os.Stat("/usr/bin/env")
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, m, &jail.Spec{Command: box.Command{
		Args: []string{"rm", "-rf", "--no-preserve-root", "/"}, Timeout: 20 * time.Second,
	}})
	if res.ExitCode == 0 {
		t.Errorf("rm -rf / succeeded inside the sandbox")
	}
	after, err := os.Stat("/usr/bin/env")
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("host /usr/bin/env changed: %v", err)
	}
	// The rootfs template must survive too: the next sandbox still works.
	if res := run(t, m, sh("echo ok")); res.Stdout != "ok\n" {
		t.Errorf("sandbox after rm -rf: %q %q", res.Stdout, res.Stderr)
	}
}

func TestBackgroundProcessesDie(t *testing.T) {
	m := newManager(t)
	// The marker makes the background sleep findable on the host.
	marker := "9" + strconv.Itoa(int(time.Now().UnixNano()%1000000))
	res := run(t, m, sh("sleep "+marker+" & echo started"))
	if res.Stdout != "started\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("background process survived its sandbox: pids %s", out)
	}
}

func TestParallel(t *testing.T) {
	m := newManager(t)
	inParallel(t, 20, func(i int) error {
		token := fmt.Sprintf("token-%d-%s", i, randHex(4))
		// Each sandbox must start with empty /work and /tmp and see only
		// its own files and processes.
		script := fmt.Sprintf("ls -A /work /tmp | grep -v : ; echo %s > /work/t; sleep 0.5; cat /work/t; ls /proc | grep -c '^[0-9]'", token)
		res, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{
			Args: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second,
		}})
		switch {
		case err != nil:
			return err
		case strings.TrimSpace(res.Stdout) != token+"\n"+procCount(res.Stdout):
			return fmt.Errorf("sandbox %d: stdout %q, want only %s", i, res.Stdout, token)
		}
		return nil
	})
}

// inParallel runs f(0) to f(n-1) at once and reports their errors.
func inParallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// procCount returns the last line of out if it is a small pid count.
func procCount(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if n, err := strconv.Atoi(last); err == nil && n < 6 {
		return last
	}
	return "<not a small pid count>"
}

func TestCancel(t *testing.T) {
	m := newManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := sh("echo before; sleep 100")
	// Cancel once the output is out, however slow the start is.
	var once sync.Once
	spec.Stdout = writerFunc(func(p []byte) (int, error) {
		once.Do(func() { time.AfterFunc(100*time.Millisecond, cancel) })
		return len(p), nil
	})
	res, err := m.Run(ctx, spec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || !res.Canceled || res.Stdout != "before\n" {
		t.Fatalf("result %+v, want Canceled with partial output", res)
	}
}

// TestCrashSweep SIGKILLs a process that runs a sandbox and its watchdog (as
// a crashed jaild run would die, with its whole cgroup, say) and checks that the next start sweeps what it left, and
// that a sweep leaves a live owner's sandbox alone.
func TestCrashSweep(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	victim := startHelper(t, env)
	survivor := startHelper(t, env)
	name := filepath.Base(env.Parent)
	if len(testenv.ProcsInCgroup(name)) < 4 {
		t.Fatalf("expected two sandboxes' processes, found %v", testenv.ProcsInCgroup(name))
	}
	// Its watchdog dies with it (see TestKilledOwner for when it lives).
	testenv.KillWithWatchdog(t, env, victim)
	// The victim's sandbox outlives it: nothing in the kernel ties it to
	// its jaild.
	if len(testenv.ProcsInCgroup(name)) < 3 {
		t.Fatalf("orphan already gone; the test would prove nothing")
	}

	m, err := jail.New(config(env)) // the next jaild start
	if err != nil {
		t.Fatal(err)
	}
	if n := len(testenv.Slots(env.StateDir)); n != 1 {
		t.Errorf("%d slots recorded after the sweep, want the survivor's 1", n)
	}
	if res, err := m.Run(context.Background(), sh("echo alive")); err != nil || res.Stdout != "alive\n" {
		t.Errorf("run after sweep: %v %+v", err, res)
	}
	// Now the survivor dies too; Sweep on a running Manager finds it.
	testenv.KillWithWatchdog(t, env, survivor)
	if n, err := m.Sweep(); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want 1 orphan", n, err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// TestPreparedRootfs runs a command in a prepared busybox root instead of
// the host template, as `jaild run --rootfs DIR` does.
func TestPreparedRootfs(t *testing.T) {
	requireHost(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox-static (scripts/setup.sh installs it)")
	}
	env := testenv.New(t, "jaild-test")
	// Not under the state dir: /run is noexec on systemd hosts.
	tmp, err := os.MkdirTemp("", "jaild-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "bb")
	for _, d := range []string{"bin", "etc", "proc", "dev", "tmp", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "ls", "cat", "id"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config(env)
	cfg.Rootfs = root
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Run(context.Background(), sh("ls /; test -e /usr/bin && echo host-usr-visible; id -u"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "bin\ndev\netc\nproc\ntmp\nwork\n1000\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// TestKeepBudget checks that a Manager with KeepBudget (a one-shot run
// joining a daemon's parent) leaves the parent's budget as it found it, and
// that one without it applies its own.
func TestKeepBudget(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	pidsMax := func() string {
		t.Helper()
		for _, d := range testenv.CgroupsNamed(filepath.Base(env.Parent)) {
			if data, err := os.ReadFile(filepath.Join(d, "pids.max")); err == nil {
				return strings.TrimSpace(string(data))
			}
		}
		t.Fatalf("no pids.max for parent %s", env.Parent)
		return ""
	}
	cfg := config(env)
	cfg.Budget.Pids = 1234
	daemon, err := jail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	if got := pidsMax(); got != "1234" {
		t.Fatalf("parent pids.max %s, want the daemon's 1234", got)
	}

	oneShot := config(env)
	oneShot.KeepBudget = true
	m, err := jail.New(oneShot)
	if err != nil {
		t.Fatal(err)
	}
	if got := pidsMax(); got != "1234" {
		t.Errorf("with KeepBudget, parent pids.max %s, want the daemon's 1234 kept", got)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}

	m, err = jail.New(config(env)) // default budget, not kept
	if err != nil {
		t.Fatal(err)
	}
	if got := pidsMax(); got != "16384" {
		t.Errorf("without KeepBudget, parent pids.max %s, want the default 16384", got)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}
