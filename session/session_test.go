package session_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

var bg = context.Background()

func create(t *testing.T, m *session.Manager, opts session.Options) *session.Session {
	t.Helper()
	s, err := m.Create(bg, opts)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

func shell(t *testing.T, s *session.Session, script string) *box.Result {
	t.Helper()
	res, err := s.Run(bg, &session.Call{Shell: script})
	if err != nil {
		t.Fatalf("Run(%q): %v", script, err)
	}
	return res
}

// TestCarryOver: files, the working directory and exported variables carry
// over from one call (one fresh sandbox) to the next, by the documented
// rules.
func TestCarryOver(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	for _, sh := range []string{"", "/bin/bash"} {
		t.Run("shell "+sh, func(t *testing.T) { testCarryOver(t, m, sh) })
	}
}

// testCarryOver runs TestCarryOver's steps with shell calls in sh (empty:
// the default, /bin/sh).
func testCarryOver(t *testing.T, m *session.Manager, sh string) {
	wantSh := sh
	if sh == "" {
		wantSh = "/bin/sh"
	}
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Env: []string{"FROM_SESSION=s"}})
	t.Cleanup(func() { m.Delete(caller.FromToken("a"), s.ID()) })
	steps := []struct {
		name, script, want string
		env                []string
		dir                string
	}{
		{name: "the shell asked for", script: `echo "$0"`, want: wantSh + "\n"},
		{name: "write, cd and export", script: "echo hi > /work/f && mkdir -p /work/src/deep && cd /work/src && export X=1 Y='a b' && Z=local && echo ok", want: "ok\n"},
		{name: "all carried over", script: `pwd; cat /work/f; echo "$X|$Y|$Z|$FROM_SESSION"; echo $$`, want: "/work/src\nhi\n1|a b||s\n1\n"},
		{name: "hard values", script: `export Q="it's '\''\" \$x \\ \` + "`" + `" NL="$(printf 'a\nb\n_')" BIN="$(printf '\351\001')" EMPTY=`, want: ""},
		{name: "hard values carried", script: `printf '%s|' "$Q" "${NL%_}" "${EMPTY-unset}"; printf '%s' "$BIN" | od -An -tx1 | tr -d ' '`, want: "it's '\\''\" $x \\ `|a\nb\n||efbfbd01\n"},
		{name: "fresh tmp", script: "ls -A /tmp; echo t > /tmp/t", want: ""},
		{name: "tmp was fresh", script: "ls -A /tmp", want: ""},
		{name: "unset and cd outside work", script: "unset X; cd /tmp; export W=2", want: ""},
		{name: "back at work", script: `pwd; echo "${X-unset}|$W"`, want: "/work\nunset|2\n"},
		{name: "call's own env and dir", script: `pwd; echo "$W|$C"; cd /work/src`, env: []string{"W=call", "C=c"}, dir: "/work/src/deep", want: "/work/src/deep\ncall|c\n"},
		{name: "call env not kept", script: `pwd; echo "$W|${C-unset}"`, want: "/work/src\n2|unset\n"},
		{name: "exit status kept and state carried", script: "cd deep; export E=3; exit 3", want: ""},
		{name: "after exit", script: `pwd; echo $E`, want: "/work/src/deep\n3\n"},
		{name: "functions dropped", script: `f() { echo f; }; export F=1; cd() { :; }; printf() { :; }`, want: ""},
		{name: "no function", script: `f 2>/dev/null || echo "none $F"`, want: "none 1\n"},
		{name: "forged report rejected", script: `cd /work; export F=2; printf 'junk' >&3`, want: ""},
		{name: "state unchanged after forgery", script: `pwd; echo "$F"`, want: "/work/src/deep\n1\n"},
		{name: "removed dir falls back to work", script: `rmdir /work/src/deep`, want: ""},
		{name: "fallback", script: `pwd`, want: "/work\n"},
	}
	for _, st := range steps {
		res, err := s.Run(bg, &session.Call{Shell: st.script, ShellPath: sh, Command: box.Command{Env: st.env, Dir: st.dir}})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		want := st.want
		if st.name == "hard values carried" && res.Prestarted {
			// A prestarted sandbox gets its env from pool-wait's
			// message, byte for byte; a fresh one from libcontainer's
			// JSON config, which turns invalid UTF-8 into U+FFFD.
			want = strings.Replace(want, "efbfbd01", "e901", 1)
		}
		if res.Stdout != want {
			t.Fatalf("%s: stdout %q, want %q (stderr %q, exit %d, prestarted %v)", st.name, res.Stdout, want, res.Stderr, res.ExitCode, res.Prestarted)
		}
		switch st.name {
		case "exit status kept and state carried":
			if res.ExitCode != 3 {
				t.Errorf("exit code %d, want 3", res.ExitCode)
			}
		case "hard values":
			// The report keeps any byte; the sandbox's environment
			// (libcontainer's JSON config) turns invalid UTF-8 into
			// U+FFFD, in a session or not.
			if env := s.Info().Env; !slices.Contains(env, "BIN=\xe9\x01") {
				t.Errorf("session env after hard values: %q", env)
			}
		}
	}
	// An argv call starts in the session's directory and changes nothing.
	shell(t, s, "cd /work/src")
	res, err := s.Run(bg, &session.Call{Command: box.Command{Args: []string{"pwd"}}})
	if err != nil || res.Stdout != "/work/src\n" {
		t.Fatalf("argv call: %v %+v", err, res)
	}
	info := s.Info()
	if info.Cwd != "/work/src" || strings.Contains(strings.Join(info.Env, ","), "PATH=") {
		t.Errorf("Info: cwd %q env %q", info.Cwd, info.Env)
	}
}

// TestSurvivesBadCalls: a fork bomb or an OOM kills one call's sandbox, not
// the session.
func TestSurvivesBadCalls(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Limits: box.Limits{Pids: 64, Memory: 64 << 20}})
	shell(t, s, "echo keep > /work/k; cd /work; export K=1")
	// The EXIT trap reports with builtins only: the state carries over
	// from a shell whose forks fail.
	for _, sh := range []string{"", "/bin/bash"} {
		bomb, err := s.Run(bg, &session.Call{ShellPath: sh, Shell: "export B=" + sh + "; b(){ b|b& }; b; sleep 2", Command: box.Command{Timeout: 20 * time.Second}})
		if err != nil || !bomb.PidsLimitHit {
			t.Fatalf("fork bomb in %q: %v %+v", sh, err, bomb)
		}
		if res := shell(t, s, `echo "$B"`); res.Stdout != sh+"\n" {
			t.Errorf("after a fork bomb in %q: %+v", sh, res)
		}
	}
	oom, err := s.Run(bg, &session.Call{Shell: "tail /dev/zero"})
	if err != nil || !oom.OOMKilled {
		t.Fatalf("oom: %v %+v", err, oom)
	}
	if res := shell(t, s, "cat /work/k; echo $K"); res.Stdout != "keep\n1\n" {
		t.Errorf("after a fork bomb and an OOM: %+v", res)
	}
}

// TestQuota: the kernel stops a write at the workspace size.
func TestQuota(t *testing.T) {
	m, _ := newManager(t, session.Config{WorkspaceBytes: 4 << 20})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), WorkspaceBytes: 1 << 20})
	res := shell(t, s, "dd if=/dev/zero of=/work/big bs=64k count=64")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
		t.Fatalf("dd past the quota: exit %d, %q", res.ExitCode, res.Stderr)
	}
	if in := s.Info(); in.WorkspaceBytes != 1<<20 || in.WorkspaceUsed < 900<<10 {
		t.Errorf("Info: quota %d used %d", in.WorkspaceBytes, in.WorkspaceUsed)
	}
	if _, err := m.Create(bg, session.Options{Owner: caller.FromToken("a"), WorkspaceBytes: 8 << 20}); !box.IsInvalid(err) {
		t.Errorf("Create above the maximum workspace: %v", err)
	}
}

// TestSessionsIsolated: one session sees nothing of another's files,
// processes or ports, nor can its owner be told the other exists.
func TestSessionsIsolated(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	a := create(t, m, session.Options{Owner: caller.FromToken("alice")})
	b := create(t, m, session.Options{Owner: caller.FromToken("bob")})
	shell(t, a, "echo secret > /work/s")
	job, err := a.Start(bg, &session.Call{Shell: "cd /work && exec python3 -m http.server --bind 127.0.0.1 8000"})
	if err != nil {
		t.Fatal(err)
	}
	fetch := "curl -sS --max-time 2 http://127.0.0.1:8000/s"
	waitServed(t, a, fetch, "secret\n")
	res := shell(t, b, "ls -A /work; "+fetch+"; ps -e -o comm= | sort | tr '\\n' ' '")
	if strings.Contains(res.Stdout, "secret") || strings.Contains(res.Stdout, "python") || !strings.Contains(res.Stderr, "Failed to connect") {
		t.Errorf("b sees a's state: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if _, err := m.Get(caller.FromToken("bob"), a.ID()); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("bob gets alice's session: %v", err)
	}
	if err := m.Delete(caller.FromToken("bob"), a.ID()); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("bob deletes alice's session: %v", err)
	}
	if l := m.List(caller.FromToken("bob")); len(l) != 1 || l[0].ID != b.ID() {
		t.Errorf("List(bob) = %+v", l)
	}
	_ = a.Kill(job)
}

func waitServed(t *testing.T, s *session.Session, fetch, want string) {
	t.Helper()
	var res *box.Result
	for i := 0; i < 100; i++ {
		res = shell(t, s, fetch)
		if res.Stdout == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("server never answered: %+v", res)
}

// TestJobs: a background server is reachable from later calls; its output
// can be read from offsets while it runs; Kill ends it with a verdict.
func TestJobs(t *testing.T) {
	m, _ := newManager(t, session.Config{MaxJobs: 2})
	s := create(t, m, session.Options{Owner: caller.FromToken("a")})
	shell(t, s, "echo page > /work/index.html")
	id, err := s.Start(bg, &session.Call{Shell: "echo starting; cd /work && exec python3 -m http.server --bind 127.0.0.1 8000"})
	if err != nil {
		t.Fatal(err)
	}
	waitServed(t, s, "curl -sS --max-time 2 http://127.0.0.1:8000/index.html", "page\n")
	st, err := s.Job(id, session.Offsets{})
	if err != nil || !st.Running || st.Stdout != "starting\n" || !strings.Contains(st.Stderr, "GET /index.html") {
		t.Fatalf("Job: %v %+v", err, st)
	}
	st2, _ := s.Job(id, st.Next)
	if st2.Stdout != "" {
		t.Errorf("output past the offset: %q", st2.Stdout)
	}
	// A short job; then the cap: two kept, a third is refused while both
	// run... the short one ended, so it makes room.
	short, err := s.Start(bg, &session.Call{Shell: "echo done; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := s.Wait(ctx, short); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Job(short, session.Offsets{}); st.Running || st.Result.ExitCode != 7 || st.Stdout != "done\n" {
		t.Errorf("short job: %+v %+v", st, st.Result)
	}
	third, err := s.Start(bg, &session.Call{Command: box.Command{Args: []string{"sleep", "100"}}})
	if err != nil {
		t.Fatalf("third job after one ended: %v", err)
	}
	if _, err := s.Start(bg, &session.Call{Command: box.Command{Args: []string{"true"}}}); !errors.Is(err, session.ErrLimit) {
		t.Errorf("fourth job with two running: %v", err)
	}
	if _, err := s.Job(short, session.Offsets{}); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("the ended job should have been forgotten: %v", err)
	}
	for _, j := range []string{id, third} {
		if err := s.Kill(j); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx, j); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Job(j, session.Offsets{}); st.Running || st.Result == nil || !st.Result.Canceled {
			t.Errorf("killed job: %+v %+v", st.Result, st)
		}
	}
	if _, err := s.Start(bg, &session.Call{Shell: "true", Command: box.Command{Timeout: 2 * time.Hour}}); !box.IsInvalid(err) {
		t.Errorf("job beyond the max job timeout: %v", err)
	}
}

// TestDeleteWithRunningJob: Delete kills what runs, and the sandbox
// prestarted for the next call, and leaves nothing mounted.
func TestDeleteWithRunningJob(t *testing.T) {
	m, env := newManager(t, session.Config{})
	s := create(t, m, session.Options{Owner: caller.FromToken("a")})
	if _, err := s.Start(bg, &session.Call{Shell: "sleep 1000 & exec sleep 1000"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(bg, &session.Call{Shell: "sleep 1000", Command: box.Command{Timeout: time.Hour}})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	waitPrestarted(t, s)
	if err := m.Delete(caller.FromToken("a"), s.ID()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, session.ErrClosed) {
		t.Errorf("a call cut by Delete returned %v", err)
	}
	if mounts := testenv.MountsUnder(env.StateDir); len(mounts) > 0 {
		t.Errorf("mounts after Delete: %v", mounts)
	}
	if procs := testenv.ProcsInCgroup(filepath.Base(env.Parent)); len(procs) > 0 {
		t.Errorf("processes after Delete: %v", procs)
	}
	if _, err := s.Run(bg, &session.Call{Shell: "true"}); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Run on a deleted session: %v", err)
	}
}

// TestExpiry: an idle session expires after its TTL (with the sandbox
// prestarted for its next call), a running job keeps it alive, and the
// maximum lifetime ends it whatever runs.
func TestExpiry(t *testing.T) {
	// The TTL leaves room for a slow machine (a cgroup v2 VM under TCG)
	// to start the busy session's job before the session could expire.
	m, env := newManager(t, session.Config{TTL: 3 * time.Second, MaxLifetime: 10 * time.Second, ReapInterval: 50 * time.Millisecond})
	busy := create(t, m, session.Options{Owner: caller.FromToken("a")})
	if _, err := busy.Start(bg, &session.Call{Command: box.Command{Args: []string{"sleep", "1000"}}}); err != nil {
		t.Fatal(err)
	}
	idle := create(t, m, session.Options{Owner: caller.FromToken("a")})
	shell(t, idle, "echo x > /work/x")
	waitPrestarted(t, idle)
	select {
	case <-idle.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("idle session did not expire")
	}
	if _, err := m.Get(caller.FromToken("a"), idle.ID()); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("Get after expiry: %v", err)
	}
	if _, err := m.Get(caller.FromToken("a"), busy.ID()); err != nil {
		t.Errorf("a session with a running job expired: %v", err)
	}
	select {
	case <-busy.Done():
	case <-time.After(40 * time.Second):
		t.Fatal("session outlived its maximum lifetime")
	}
	if mounts := testenv.MountsUnder(env.StateDir); len(mounts) > 0 {
		t.Errorf("mounts after expiry: %v", mounts)
	}
}

// TestLimits: sessions per owner and per daemon, and bad options.
func TestLimits(t *testing.T) {
	m, _ := newManager(t, session.Config{MaxSessions: 2, MaxPerOwner: 1})
	create(t, m, session.Options{Owner: caller.FromToken("a")})
	if _, err := m.Create(bg, session.Options{Owner: caller.FromToken("a")}); !errors.Is(err, session.ErrLimit) {
		t.Errorf("second session of a: %v", err)
	}
	create(t, m, session.Options{Owner: caller.FromToken("b")})
	if _, err := m.Create(bg, session.Options{Owner: caller.FromToken("c")}); !errors.Is(err, session.ErrLimit) {
		t.Errorf("third session of the daemon: %v", err)
	}
	for _, o := range []session.Options{
		{Owner: caller.FromToken("d"), Cwd: "/tmp"},
		{Owner: caller.FromToken("d"), Env: []string{"1X=1"}},
		{Owner: caller.FromToken("d"), TTL: 48 * time.Hour},
		{Owner: caller.FromToken("d"), Limits: box.Limits{Pids: 1}},
		{}, // nobody's
	} {
		if _, err := m.Create(bg, o); !box.IsInvalid(err) {
			t.Errorf("Create(%+v) = %v, want invalid", o, err)
		}
	}
}

// TestRemovedOnRestart: a jaild SIGKILLed with a session, a running job
// and a sandbox prestarted for the next call leaves nothing once the next
// jaild starts.
func TestRemovedOnRestart(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-stest")
	cmd := testenv.StartHelper(t, env, "helper-session")
	// Its init execs pool-wait just after the helper saw it started.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		procs := testenv.ProcsInCgroup(filepath.Base(env.Parent))
		if slices.ContainsFunc(procs, func(p string) bool { return strings.Contains(p, "pool-wait") }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prestarted sandbox waits; the test would prove less: %v", procs)
		}
	}
	// The jaild and its watchdog die together: the next start sweeps.
	// (The waiting init exits by itself once its command pipe's writer,
	// the dead jaild, is gone; its cgroup, state and record stay.)
	testenv.KillWithWatchdog(t, env, cmd)
	if len(testenv.ProcsInCgroup(filepath.Base(env.Parent))) == 0 {
		t.Fatal("the dead jaild's session is already gone; the test would prove nothing")
	}
	jm, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent})
	if err != nil {
		t.Fatal(err)
	}
	if err := jm.Close(); err != nil {
		t.Error(err)
	}
	// testenv's check at cleanup: no process, cgroup, slot, mount or
	// workspace left.
}
