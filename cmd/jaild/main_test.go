package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// jaildBin is the binary under test, built once by TestMain.
var jaildBin string

func TestMain(m *testing.M) {
	if os.Getenv(printGOMAXPROCS) != "" {
		// A helper of TestWorkerGOMAXPROCS: what the runtime makes of
		// this host and cgroup by default.
		fmt.Println(runtime.GOMAXPROCS(0))
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "jaild-bin-")
	if err != nil {
		panic(err)
	}
	if jaildBin, err = testenv.BuildJaild(dir); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// install is a private jaild installation for one test, checked for
// leftovers at cleanup.
type install struct{ *testenv.Install }

func newInstall(t *testing.T) install {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	return install{testenv.New(t, "jaild-cli-test")}
}

func (in install) cmd(args ...string) *exec.Cmd {
	full := append([]string{args[0], "--state-dir", in.StateDir, "--cgroup-parent", in.Parent}, args[1:]...)
	cmd := exec.Command(jaildBin, full...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestRunExitCodes(t *testing.T) {
	in := newInstall(t)
	stdinFile := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(stdinFile, []byte("from a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		env        []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "echo", args: []string{"--", "echo", "hi"}, wantStdout: "hi\n"},
		{name: "shell", args: []string{"--shell", "echo a; echo b >&2; exit 7"}, wantCode: 7, wantStdout: "a\n", wantStderr: "b\n"},
		{name: "stdin file", args: []string{"--stdin", stdinFile, "--", "cat"}, wantStdout: "from a file\n"},
		{name: "env flag", args: []string{"--env", "A=1", "--env", "B=2", "--shell", "echo $A$B"}, wantStdout: "12\n"},
		{name: "signal", args: []string{"--shell", "sh -c 'kill -KILL $$'"}, wantCode: 137},
		{name: "timeout", args: []string{"--timeout", "500ms", "--shell", "echo partial; sleep 10"}, wantCode: api.ExitTimeout, wantStdout: "partial\n"},
		{name: "timeout from env", env: []string{"JAILD_TIMEOUT=500ms"}, args: []string{"--", "sleep", "10"}, wantCode: api.ExitTimeout},
		{name: "flag beats env", env: []string{"JAILD_TIMEOUT=100ms"}, args: []string{"--timeout", "20s", "--shell", "sleep 0.5; echo done"}, wantStdout: "done\n"},
		{name: "oom", args: []string{"--memory", "32M", "--", "tail", "/dev/zero"}, wantCode: api.ExitOOM},
		{name: "not found", args: []string{"--", "no-such-cmd"}, wantCode: api.ExitNotFound, wantStderr: "command not found"},
		{name: "not executable", args: []string{"--", "/etc/passwd"}, wantCode: api.ExitNotExecutable},
		{name: "missing command", args: []string{}, wantCode: api.ExitUsage, wantStderr: "missing command"},
		{name: "both shell and argv", args: []string{"--shell", "true", "--", "true"}, wantCode: api.ExitUsage},
		{name: "bad memory", args: []string{"--memory", "lots", "--", "true"}, wantCode: api.ExitUsage, wantStderr: "not a size"},
		{name: "memory too small", args: []string{"--memory", "1K", "--", "true"}, wantCode: api.ExitUsage, wantStderr: "memory"},
		{name: "bad timeout", args: []string{"--timeout", "-1s", "--", "true"}, wantCode: api.ExitUsage},
		{name: "bad cwd", args: []string{"--cwd", "/etc", "--", "true"}, wantCode: api.ExitUsage, wantStderr: "cwd"},
		{name: "env without =", args: []string{"--env", "A", "--", "true"}, wantCode: api.ExitUsage, wantStderr: "KEY=VALUE"},
		{name: "unknown flag", args: []string{"--frobnicate", "--", "true"}, wantCode: api.ExitUsage},
		{name: "missing rootfs", args: []string{"--rootfs", "/nonexistent-rootfs", "--", "true"}, wantCode: api.ExitRootfs, wantStderr: "rootfs"},
		{name: "missing stdin file", args: []string{"--stdin", "/nonexistent", "--", "true"}, wantCode: api.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := in.cmd(append([]string{"run"}, tt.args...)...)
			cmd.Env = append(cmd.Env, tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := exitCode(cmd.Run())
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.wantCode, stderr.String())
			}
			if tt.wantStdout != "" && stdout.String() != tt.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.wantStdout)
			}
			if tt.wantStderr != "" && !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
			if code == api.ExitUsage && strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 && !strings.Contains(stderr.String(), "USAGE") {
				t.Errorf("usage error is not one line: %q", stderr.String())
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	in := newInstall(t)
	out, err := in.cmd("run", "--json", "--max-output", "10", "--shell", "printf '\\377'; seq 1 100").Output()
	if exitCode(err) != 0 {
		t.Fatalf("jaild run --json: %v", err)
	}
	// The /run answer's shape: output that is not UTF-8 in base64.
	var res api.Response
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output is not a /run answer: %v\n%s", err, out)
	}
	if !res.StdoutTruncated || res.StdoutBytes != 293 || res.ID == "" || res.Stdout != "" || !strings.HasPrefix(string(res.StdoutB64), "\xff1\n") {
		t.Errorf("result %+v", res)
	}
}

func TestNotRoot(t *testing.T) {
	newInstall(t)
	cmd := exec.Command(jaildBin, "run", "--", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if code := exitCode(cmd.Run()); code != api.ExitNotRoot {
		t.Errorf("exit %d, want %d; stderr %q", code, api.ExitNotRoot, stderr.String())
	}
}

func TestDoctor(t *testing.T) {
	in := newInstall(t)
	out, err := in.cmd("doctor").CombinedOutput()
	if exitCode(err) != 0 {
		t.Fatalf("doctor failed: %v\n%s", err, out)
	}
	for _, want := range []string{"user namespaces", "cgroups", "seccomp", "ran a command in a real sandbox", "none: every command is allowed", "serve, mcp and remote run " + filepath.Join(filepath.Dir(jaildBin), "jaild-server")} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

// TestDoctorStateDir checks that doctor reports a state dir that others
// could change, and that run refuses it with the same one-line fix.
func TestDoctorStateDir(t *testing.T) {
	in := newInstall(t)
	if err := os.Chmod(in.StateDir, 0o777); err != nil {
		t.Fatal(err)
	}
	want := "state dir " + in.StateDir + " is writable by group or others (mode 0777): chmod go-w " + in.StateDir
	out, err := in.cmd("doctor").CombinedOutput()
	if code := exitCode(err); code != api.ExitUnsupported || !strings.Contains(string(out), "MISSING  state dir") || !strings.Contains(string(out), want) {
		t.Errorf("doctor: exit %d, want %d and MISSING state dir saying %q:\n%s", code, api.ExitUnsupported, want, out)
	}
	if strings.Contains(string(out), "real sandbox") {
		t.Errorf("doctor ran a sandbox in an untrusted state dir:\n%s", out)
	}
	out, err = in.cmd("run", "--", "true").CombinedOutput()
	if code := exitCode(err); code != api.ExitUsage || string(out) != "jaild: jail: "+want+"\n" {
		t.Errorf("run: exit %d, want %d and the one line %q:\n%s", code, api.ExitUsage, want, out)
	}
}

// TestKilledRun SIGKILLs a jaild run mid-command, with no other jaild on
// the installation, and checks that its command dies promptly, long before
// its timeout: jaild's watchdog tears the sandbox down.
func TestKilledRun(t *testing.T) {
	in := newInstall(t)
	victim := startWithSandbox(t, in, "run", "--timeout", "20s", "--", "sleep", "45")
	name := filepath.Base(in.Parent)
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) == 0; {
		for _, p := range testenv.ProcsInCgroup(name) {
			if pid, cmd, _ := strings.Cut(p, " "); strings.HasPrefix(cmd, `"sleep 45`) {
				n, _ := strconv.Atoi(pid)
				pids = append(pids, n)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep does not run in the sandbox: %v", testenv.ProcsInCgroup(name))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Until then its watchdog waits in internal/inithook's C constructor:
	// one thread, no Go runtime started (which would add its own).
	dogs := testenv.WatchdogsOf(in.StateDir, victim.Process.Pid)
	if len(dogs) != 1 {
		t.Fatalf("watchdogs %v, want jaild's one", dogs)
	}
	if th := threads(t, dogs[0]); th != 1 {
		t.Errorf("the dormant watchdog has %d threads, want 1 (it has started Go)", th)
	}
	_ = victim.Process.Signal(syscall.SIGKILL)
	_ = victim.Wait()
	killed := time.Now()
	for running(pids[0]) {
		if time.Since(killed) > time.Second {
			t.Fatalf("sleep (pid %d) still runs %v after its jaild was killed", pids[0], time.Since(killed))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("sleep gone %v after jaild", time.Since(killed).Round(time.Millisecond))
	// The watchdog removes the cgroups and state before it exits, which on
	// a loaded machine takes a while after the processes died.
	deadline := time.Now().Add(30 * time.Second)
	for len(testenv.Watchdogs(in.StateDir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// testenv's check at cleanup: no cgroup, state, slot or watchdog left.
}

// threads is the number of threads of process pid.
func threads(t *testing.T, pid int) int {
	t.Helper()
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no Threads line in /proc/%d/status", pid)
	return 0
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(st, ')')
	return i < 0 || !bytes.HasPrefix(st[i+1:], []byte(" Z"))
}

// TestKilledRunIsSwept SIGKILLs a jaild run mid-command together with its
// watchdog and checks that the next jaild start destroys the sandbox it left
// behind.
func TestKilledRunIsSwept(t *testing.T) {
	in := newInstall(t)
	victim := startWithSandbox(t, in, "run", "--timeout", "5m", "--shell", "sleep 300")
	// The watchdog may show in the state dir a moment after the sandbox.
	dogs := testenv.Watchdogs(in.StateDir)
	for deadline := time.Now().Add(10 * time.Second); len(dogs) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		dogs = testenv.Watchdogs(in.StateDir)
	}
	if len(dogs) != 1 {
		t.Fatalf("watchdogs %v, want jaild's one", dogs)
	}
	// Stopped first, so that it cannot sweep before it dies.
	_ = syscall.Kill(dogs[0], syscall.SIGSTOP)
	_ = victim.Process.Signal(syscall.SIGKILL)
	_ = victim.Wait()
	_ = syscall.Kill(dogs[0], syscall.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); running(dogs[0]) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(sandboxes(in)) != 1 {
		t.Fatalf("the orphan is already gone; the test would prove nothing")
	}
	if out, err := in.cmd("run", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("next run: %v %s", err, out)
	}
	if s := sandboxes(in); len(s) != 0 {
		t.Errorf("orphan not swept: %v", s)
	}
}

// startWithSandbox starts jaild with args and waits until its one sandbox
// exists (jaild run prints nothing until the command ends).
func startWithSandbox(t *testing.T, in install, args ...string) *exec.Cmd {
	t.Helper()
	cmd := in.cmd(args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// A killed jaild's watchdog tears its sandbox down: let it
		// finish before testenv looks for leftovers.
		for deadline := time.Now().Add(10 * time.Second); len(testenv.Watchdogs(in.StateDir)) > 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for len(sandboxes(in)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(sandboxes(in)); n != 1 {
		t.Fatalf("%d sandboxes, want the one of jaild %v", n, args)
	}
	return cmd
}

func sandboxes(in install) []string {
	ents, _ := os.ReadDir(filepath.Join(in.StateDir, "containers"))
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids
}

// TestInterruptedRun: SIGINT to jaild run kills and removes the sandbox and
// exits 130, as a shell would.
func TestInterruptedRun(t *testing.T) {
	in := newInstall(t)
	cmd := startWithSandbox(t, in, "run", "--timeout", "5m", "--", "sleep", "300")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(cmd.Wait()); code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	if s := sandboxes(in); len(s) != 0 {
		t.Errorf("sandbox left after SIGINT: %v", s)
	}
}
