package session_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"

	// The test binary is re-executed as each container's init, like jaild
	// itself; package jail handles its re-execution as a watchdog.
	_ "github.com/jaild/jaild/internal/inithook"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper-session" {
		helperSession() // never returns
	}
	os.Exit(m.Run())
}

func requireHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: sandboxes need namespaces and cgroups")
	}
	for _, f := range jail.Check() {
		if f.Required && !f.OK {
			t.Skipf("host lacks %s: %s", f.Name, f.Detail)
		}
	}
}

// newManager returns a session Manager over a jail Manager on a private
// installation; at cleanup both are closed, then testenv checks that
// nothing is left: processes, cgroups, slots, workspace mounts, netns pins.
func newManager(t testing.TB, cfg session.Config) (*session.Manager, *testenv.Install) {
	t.Helper()
	m, _, env := setup(t, cfg)
	return m, env
}

func newManagers(t testing.TB) (*session.Manager, *jail.Manager) {
	t.Helper()
	m, jm, _ := setup(t, session.Config{})
	return m, jm
}

func setup(t testing.TB, cfg session.Config) (*session.Manager, *jail.Manager, *testenv.Install) {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-stest")
	jm, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent, WorkDir: cfg.WorkDir})
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := jm.Close(); err != nil {
			t.Errorf("jail Close: %v", err)
		}
	})
	m, err := session.New(session.Local(jm), cfg)
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("session Close: %v", err)
		}
	})
	return m, jm, env
}

// helperSession is a jaild with a session, a file in its workspace, a
// background job and a sandbox prestarted for the next call, to be
// SIGKILLed. It says "started" once the job runs and the sandbox waits.
func helperSession() {
	jm, err := jail.New(jail.Config{StateDir: os.Getenv("JAILD_TEST_STATE"), CgroupParent: os.Getenv("JAILD_TEST_PARENT")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	m, err := session.New(session.Local(jm), session.Config{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	ctx := context.Background()
	s, err := m.Create(ctx, session.Options{Owner: caller.FromToken("crash")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.Run(ctx, &session.Call{Shell: "echo data > /work/f"}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	job, err := s.Start(ctx, &session.Call{Shell: "echo job; exec sleep 1000"})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, err := s.Job(job, session.Offsets{})
		if err == nil && st.Stdout == "job\n" && session.Prestarted(s) {
			break
		}
		if err != nil || !st.Running || time.Now().After(deadline) {
			fmt.Println("ERR", err, st)
			os.Exit(1)
		}
	}
	_, _ = flushWriter{w}.Write([]byte("started\n"))
	time.Sleep(time.Hour)
	os.Exit(1)
}

type flushWriter struct{ w *bufio.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.w.Flush()
	return n, err
}
