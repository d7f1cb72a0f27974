package jail_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"

	// The test binary is re-executed as each container's init, like jaild
	// itself; package jail handles its re-execution as a watchdog.
	_ "github.com/jaild/jaild/internal/inithook"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper-run" {
		helperRun() // never returns
	}
	if len(os.Args) > 1 && os.Args[1] == "helper-workspace" {
		helperWorkspace() // never returns
	}
	if len(os.Args) > 1 && os.Args[1] == "helper-teardown" {
		helperTeardown() // never returns
	}
	if len(os.Args) > 1 && os.Args[1] == "helper-nofile" {
		helperNofile() // never returns
	}
	os.Exit(m.Run())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requireHost skips where the host truly cannot run sandboxes, saying why.
func requireHost(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	for _, f := range jail.Check() {
		if f.Required && !f.OK {
			t.Skipf("host lacks %s: %s", f.Name, f.Detail)
		}
	}
}

// newManager returns a Manager on a private installation and, at cleanup,
// closes it; testenv then asserts that nothing of it is left on the host.
func newManager(t testing.TB) *jail.Manager {
	t.Helper()
	m, _ := newManagerWith(t, func(*jail.Config) {})
	return m
}

// newManagerWith is newManager with its config changed by edit first; it
// returns the test installation too.
func newManagerWith(t testing.TB, edit func(*jail.Config)) (*jail.Manager, *testenv.Install) {
	t.Helper()
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cfg := config(env)
	edit(&cfg)
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m, env
}

func config(env *testenv.Install) jail.Config {
	return jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent}
}

// helperRun is a stand-in for a `jaild run` process that the crash test
// SIGKILLs: it builds a Manager on the installation named by the
// environment, starts a long command, and says so on stdout.
func helperRun() {
	m, err := jail.New(jail.Config{StateDir: os.Getenv("JAILD_TEST_STATE"), CgroupParent: os.Getenv("JAILD_TEST_PARENT")})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	spec := &jail.Spec{Command: box.Command{
		Args:    []string{"/bin/sh", "-c", "sleep 1000 & echo started; sleep 1000"},
		Timeout: box.MaxTimeout,
		Stdout:  lineWriter{bufio.NewWriter(os.Stdout)},
	}}
	egressIfAsked(spec)
	_, err = m.Run(context.Background(), spec)
	fmt.Println("ERR", err)
	os.Exit(1)
}

type lineWriter struct{ w *bufio.Writer }

func (l lineWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.w.Flush()
	return n, err
}
