package jail_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// newPool returns a pool of size on a private installation, closed at
// cleanup before its Manager.
func newPool(t *testing.T, size int) *jail.Pool {
	t.Helper()
	m := newManager(t)
	p, err := m.NewPool(size, box.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool Close: %v", err)
		}
	})
	return p
}

// waitReady waits until the pool has a sandbox ready.
func waitReady(t *testing.T, p *jail.Pool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.Ready() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runPooled runs spec and fails t unless a pooled sandbox served it.
// runWays runs f with the two ways a pool serves a run: a sandbox ready in
// the pool (runPooled), and one built for the run, a miss (jail.RunMiss).
func runWays(t *testing.T, p *jail.Pool, f func(t *testing.T, run func(*jail.Spec) (*box.Result, error))) {
	t.Run("pooled", func(t *testing.T) {
		f(t, func(spec *jail.Spec) (*box.Result, error) { return runPooled(t, p, spec) })
	})
	t.Run("miss", func(t *testing.T) {
		f(t, func(spec *jail.Spec) (*box.Result, error) { return jail.RunMiss(p, context.Background(), spec) })
	})
}

func runPooled(t *testing.T, p *jail.Pool, spec *jail.Spec) (*box.Result, error) {
	t.Helper()
	waitReady(t, p)
	hits, _ := p.Stats()
	res, err := p.Run(context.Background(), spec)
	if h, _ := p.Stats(); h == hits {
		t.Fatalf("no pooled sandbox served the run")
	}
	return res, err
}

func TestPoolBehaviour(t *testing.T) {
	p := newPool(t, 2)
	tests := []struct {
		name     string
		spec     *jail.Spec
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{name: "argv", spec: &jail.Spec{Command: box.Command{Args: []string{"echo", "it's", "a \"quoted\" $HOME `x`\nline"}}},
			wantOut: "it's a \"quoted\" $HOME `x`\nline\n"},
		{name: "shell", spec: sh("echo $HOME $USER; echo err >&2; exit 3"), wantOut: "/work sandbox\n", wantErr: "err\n", wantCode: 3},
		{name: "env replaces, nothing else", spec: &jail.Spec{Command: box.Command{Args: []string{"env"}, Env: []string{"A-B=x y", "HOME=/tmp"}}},
			wantOut: "PATH=" + jail.Path + "\nHOME=/tmp\nUSER=sandbox\nLANG=C.UTF-8\nA-B=x y\n"},
		{name: "stdin", spec: &jail.Spec{Command: box.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("abc\n")}}, wantOut: "ABC\n"},
		{name: "no stdin", spec: sh("cat; echo done"), wantOut: "done\n"},
		{name: "cwd and pid 1", spec: sh("pwd; echo $$"), wantOut: "/work\n1\n"},
		{name: "cwd /tmp", spec: &jail.Spec{Command: box.Command{Args: []string{"pwd"}, Dir: "/tmp/"}}, wantOut: "/tmp\n"},
		{name: "no script fd left", spec: sh("ls /proc/self/fd"), wantOut: "0\n1\n2\n3\n"}, // 3 is ls's own directory fd
		{name: "exit 127 of the command itself", spec: sh("exit 127"), wantCode: 127},
		{name: "PATH of the command", spec: &jail.Spec{Command: box.Command{Args: []string{"ls", "/work"}, Env: []string{"PATH=/nowhere:/usr/bin"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runWays(t, p, func(t *testing.T, run func(*jail.Spec) (*box.Result, error)) {
				if r, ok := tt.spec.Stdin.(*strings.Reader); ok {
					r.Seek(0, io.SeekStart) // the other way read it
				}
				res, err := run(tt.spec)
				if err != nil {
					t.Fatal(err)
				}
				if (tt.wantOut != "" || tt.wantCode == 0) && res.Stdout != tt.wantOut {
					t.Errorf("stdout %q, want %q", res.Stdout, tt.wantOut)
				}
				if tt.wantErr != "" && res.Stderr != tt.wantErr {
					t.Errorf("stderr %q, want %q", res.Stderr, tt.wantErr)
				}
				if res.ExitCode != tt.wantCode {
					t.Errorf("exit %d, want %d (stderr %q)", res.ExitCode, tt.wantCode, res.Stderr)
				}
			})
		})
	}
}

// TestPoolStartErrors: a pooled sandbox reports a command it cannot run with
// the errors a fresh one gives, and a command cannot forge that report.
func TestPoolStartErrors(t *testing.T) {
	p := newPool(t, 1)
	tests := []struct {
		name string
		spec *jail.Spec
		want error
	}{
		{"not in PATH", &jail.Spec{Command: box.Command{Args: []string{"no-such-command"}}}, box.ErrCommandNotFound},
		{"not in the command's PATH", &jail.Spec{Command: box.Command{Args: []string{"ls"}, Env: []string{"PATH=/nowhere"}}}, box.ErrCommandNotFound},
		{"a shell builtin only", &jail.Spec{Command: box.Command{Args: []string{"cd"}}}, box.ErrCommandNotFound},
		{"missing path", &jail.Spec{Command: box.Command{Args: []string{"/no/such"}}}, box.ErrCommandNotFound},
		{"not executable", &jail.Spec{Command: box.Command{Args: []string{"/etc/passwd"}}}, box.ErrNotExecutable},
		{"a directory", &jail.Spec{Command: box.Command{Args: []string{"/usr"}}}, box.ErrNotExecutable},
		{"quotes in the name", &jail.Spec{Command: box.Command{Args: []string{"x'; echo pwned; '"}}}, box.ErrCommandNotFound},
		{"a name like an option", &jail.Spec{Command: box.Command{Args: []string{"-i"}}}, box.ErrCommandNotFound},
		{"a name like a variable", &jail.Spec{Command: box.Command{Args: []string{"A=b"}}}, box.ErrCommandNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runWays(t, p, func(t *testing.T, run func(*jail.Spec) (*box.Result, error)) {
				res, err := run(tt.spec)
				if !errors.Is(err, tt.want) {
					t.Errorf("err %v, want %v; result %+v", err, tt.want, res)
				}
			})
		})
	}
	// The command has no fd 4 to write a fake report to.
	res, err := runPooled(t, p, sh("echo notfound >&4; echo $?"))
	if err != nil || !strings.HasSuffix(res.Stdout, "2\n") {
		t.Errorf("forged report: %v %+v", err, res)
	}
}

func TestPoolTimeoutAndCancel(t *testing.T) {
	p := newPool(t, 1)
	spec := sh("echo partial; sleep 100")
	spec.Timeout = 500 * time.Millisecond
	res, err := runPooled(t, p, spec)
	if err != nil || !res.TimedOut || res.Stdout != "partial\n" {
		t.Errorf("timeout: %v %+v", err, res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec = sh("echo before; sleep 100")
	var once sync.Once
	spec.Stdout = writerFunc(func(b []byte) (int, error) {
		once.Do(func() { time.AfterFunc(100*time.Millisecond, cancel) })
		return len(b), nil
	})
	waitReady(t, p)
	h, _ := p.Stats()
	res, err = p.Run(ctx, spec)
	if h2, _ := p.Stats(); h2 == h {
		t.Fatalf("cancel test ran cold")
	}
	if !errors.Is(err, context.Canceled) || res == nil || !res.Canceled || res.Stdout != "before\n" {
		t.Errorf("cancel: %v %+v", err, res)
	}
}

// TestPoolFallback: runs a pooled sandbox cannot serve exactly run cold,
// with the same results.
func TestPoolFallback(t *testing.T) {
	p := newPool(t, 1)
	tests := []*jail.Spec{
		{Limits: box.Limits{TmpfsSize: 32 << 20}, Command: box.Command{Args: []string{"echo", "ok"}}},
		// A fresh sandbox's init creates the directory.
		{Command: box.Command{Args: []string{"echo", "ok"}, Dir: "/work/sub/dir"}},
	}
	for i, spec := range tests {
		hits, _ := p.Stats()
		res, err := p.Run(context.Background(), spec)
		if err != nil || res.Stdout != "ok\n" {
			t.Errorf("%d: %v %+v", i, err, res)
		}
		if h, _ := p.Stats(); h != hits {
			t.Errorf("%d: served by the pool", i)
		}
	}
	// Cold runs keep the cold errors.
	if _, err := p.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"echo"}, Dir: "/etc"}}); !box.IsInvalid(err) {
		t.Errorf("bad cwd: %v", err)
	}
}

func TestPoolParallel(t *testing.T) {
	p := newPool(t, 4)
	inParallel(t, 12, func(i int) error {
		want := fmt.Sprintf("run-%d", i)
		res, err := p.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "ls -A /work; echo " + want}}})
		if err != nil || res.Stdout != want+"\n" {
			return fmt.Errorf("%d: %v %+v", i, err, res)
		}
		return nil
	})
}

// TestPoolSize: a pool holds exactly its size in started sandboxes, not one
// more, and refills after a run.
func TestPoolSize(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := m.NewPool(2, box.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	containers := func() int {
		ents, _ := os.ReadDir(filepath.Join(env.StateDir, "containers"))
		return len(ents)
	}
	for range 2 {
		deadline := time.Now().Add(20 * time.Second)
		// The pool settles full and idle, the used sandbox of the last
		// round torn down: every container left is a ready one.
		for (p.Ready() < 2 || jail.PoolBuilding(p) > 0 || containers() != 2) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := containers(); p.Ready() != 2 || jail.PoolBuilding(p) != 0 || n != 2 {
			t.Fatalf("ready %d, building %d, containers %d; want 2, 0 and 2", p.Ready(), jail.PoolBuilding(p), n)
		}
		// Each waits in jaild's own minimal init, not a shell (once it
		// has been exec'd: Ready counts started sandboxes).
		var procs []string
		waitFor(t, 10*time.Second, "the ready sandboxes' inits to wait in pool-wait", func() bool {
			procs = testenv.ProcsInCgroup(filepath.Base(env.Parent))
			for _, pr := range procs {
				if !strings.Contains(pr, `"/proc/self/exe pool-wait seccomp "`) {
					return false
				}
			}
			return len(procs) == 2
		})
		if _, err := runPooled(t, p, sh("true")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolReplacesDuringLongRun: a run that outlasts the replacement delay
// gets its sandbox's replacement built while it runs, so that a long command
// does not leave the pool short until it ends.
func TestPoolReplacesDuringLongRun(t *testing.T) {
	p := newPool(t, 1)
	waitReady(t, p)
	// The command blocks on its stdin until the test closes it.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "read x"}, Stdin: stdinR, Timeout: time.Minute}})
		done <- err
	}()
	waitFor(t, 20*time.Second, "the replacement to be ready while the command runs", func() bool {
		if h, _ := p.Stats(); h == 0 {
			return false // not handed over yet
		}
		select {
		case err := <-done:
			t.Fatalf("the command ended before the test released it: %v", err)
		default:
		}
		return p.Ready() == 1
	})
	stdinW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPoolIsolation: a command handed to a pooled sandbox runs exactly as
// locked down as in a fresh one: same user, no capabilities, no_new_privs,
// the same seccomp filter, the same mounts, and it is pid 1 with nothing of
// the waiting init left (no extra fd, no other process). The processes are
// counted by the shell's own glob, so that no other process of the probe's
// is running then.
func TestPoolIsolation(t *testing.T) {
	p := newPool(t, 1)
	probe := sh(`grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
tr '\0' ' ' < /proc/1/cmdline; echo
set -- /proc/[0-9]*; echo $# processes
ls /proc/self/fd | wc -l
awk '{print $4, $5, $6, $(NF-2), $NF}' /proc/self/mountinfo | sed -E 's/(uid|gid)=[0-9]+/\1=N/g' | sort
hostname`)
	// A working directory a pooled sandbox does not serve: a fresh one.
	cold := probe.Command
	cold.Dir = "/work/cold"
	hits, _ := p.Stats()
	fresh, err := p.Run(context.Background(), &jail.Spec{Command: cold})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := p.Stats(); h != hits {
		t.Fatal("the fresh run was served by the pool")
	}
	pooled, err := runPooled(t, p, probe)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.ExitCode != 0 || fresh.Stdout == "" {
		t.Fatalf("probe failed in a fresh sandbox: %+v", fresh)
	}
	if pooled.Stdout != fresh.Stdout {
		t.Errorf("a pooled sandbox differs from a fresh one:\npooled:\n%s\nfresh:\n%s", pooled.Stdout, fresh.Stdout)
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "/bin/sh -c grep", "\n1 processes\n"} {
		if !strings.Contains(pooled.Stdout, want) {
			t.Errorf("pooled sandbox: no %q in\n%s", want, pooled.Stdout)
		}
	}
}

// TestPoolLimits: a run that asks for other memory, pids or CPU limits than
// the pool's still gets a pooled sandbox, with exactly its limits enforced.
func TestPoolLimits(t *testing.T) {
	p := newPool(t, 1)
	tests := []struct {
		name  string
		spec  *jail.Spec
		check func(*box.Result) bool
	}{
		{"pids", &jail.Spec{Limits: box.Limits{Pids: 16}, Command: box.Command{
			Args: []string{"/bin/sh", "-c", "for i in $(seq 40); do sleep 2 & done; wait"}, Timeout: 10 * time.Second}},
			func(r *box.Result) bool { return r.PidsLimitHit && r.Limits.Pids == 16 }},
		{"memory", &jail.Spec{Limits: box.Limits{Memory: 32 << 20, CPUs: 0.5}, Command: box.Command{
			Args: []string{"/bin/sh", "-c", "head -c 60000000 /dev/zero > /tmp/f"}, Timeout: 10 * time.Second}},
			func(r *box.Result) bool { return r.OOMKilled && r.Limits.Memory == 32<<20 && r.Limits.CPUs == 0.5 }},
		{"more memory than the pool's", &jail.Spec{Limits: box.Limits{Memory: 512 << 20}, Command: box.Command{
			Args: []string{"/bin/sh", "-c", "head -c 40000000 /dev/zero > /tmp/f"}}},
			func(r *box.Result) bool { return !r.OOMKilled && r.ExitCode == 0 && r.MemoryPeak > 40000000 }},
		// The next sandbox has the pool's own limits again.
		{"defaults", sh("true"), func(r *box.Result) bool { return r.Limits == (box.Limits{}).WithDefaults() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runWays(t, p, func(t *testing.T, run func(*jail.Spec) (*box.Result, error)) {
				res, err := run(tt.spec)
				if err != nil {
					t.Fatal(err)
				}
				if !tt.check(res) {
					t.Errorf("limits not as asked: %+v", res)
				}
			})
		})
	}
}

// TestNamespacePins: a sandbox's namespaces and its init's sealed
// executable are held open by jaild from its command's start until its
// teardown (so that their end is not on the answer's path), not while it
// waits for a command (an idle one costs no descriptors for them), and none
// is left open once the sandboxes are gone.
func TestNamespacePins(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The command has its own executable by the time the pins after the
	// hand-over are taken: the sealed one must have been pinned before.
	jail.SetHandoverHook(m, func() { time.Sleep(50 * time.Millisecond) })
	p, err := m.NewPool(1, box.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p)
	noPins(t, "for a waiting sandbox")
	// While the command runs (until its stdin ends), its sandbox is
	// pinned: its sealed executable too, which only a pin taken before the
	// command's exec can hold (after, the init's executable is the
	// command's).
	for range 2 {
		waitReady(t, p)
		noPins(t, "before a run") // the last run's are gone with its sandbox
		pinnedWhileRunning(t, p)
	}
	if res, err := m.Run(context.Background(), sh("true")); err != nil || res.ExitCode != 0 {
		t.Fatalf("cold run: %v %+v", err, res)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	noPins(t, "after Close")
}

// noPins fails unless this process soon holds no namespace or sealed-binary
// descriptor. libcontainer's mount source thread holds the last started
// sandbox's mount namespace for a moment after its start returns (it closes
// it on its way out); a pin is never closed but by Destroy.
func noPins(t *testing.T, when string) {
	t.Helper()
	waitFor(t, 10*time.Second, "no pins open "+when, func() bool { return len(pinFDs(t)) == 0 })
}

// pinFDs counts this process's open namespace descriptors by kind and by
// link ("net:[4026532177]"), and under "exe" its descriptors of a sealed
// copy of its own binary (which libcontainer mounts alone at the root of
// an overlayfs: "/<name>").
func pinFDs(t *testing.T) map[string]int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sealed := "/" + filepath.Base(exe)
	if exe == sealed {
		t.Fatalf("the test binary is %s itself: a sealed copy would look the same", exe)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		if l == sealed {
			kinds["exe"]++
		} else if k, _, ok := strings.Cut(l, ":["); ok && !strings.Contains(k, "/") && k != "pipe" && k != "socket" && k != "anon_inode" {
			kinds[k]++
			kinds[l]++
		}
	}
	return kinds
}

// pinnedWhileRunning runs a command on p that waits for its stdin and
// checks, while it waits, that its sandbox's namespaces and sealed
// executable are pinned.
func pinnedWhileRunning(t *testing.T, p *jail.Pool) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	done := make(chan error, 1)
	go func() {
		spec := sh("readlink /proc/self/ns/net; read x")
		spec.Stdin, spec.Stdout = inR, outW
		_, err := p.Run(context.Background(), spec)
		outW.Close()
		done <- err
	}()
	net, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	kinds := pinFDs(t)
	// Its own: another sandbox being built meanwhile holds one too.
	if kinds[strings.TrimSpace(net)] == 0 {
		t.Errorf("the running sandbox's %s is not pinned (open: %v)", strings.TrimSpace(net), kinds)
	}
	for _, k := range []string{"mnt", "pid", "net", "ipc", "uts", "user", "cgroup", "exe"} {
		if kinds[k] == 0 {
			t.Errorf("no %s pinned for the running sandbox (open: %v)", k, kinds)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
