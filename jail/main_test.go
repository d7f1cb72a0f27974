package jail_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/jail"
	"github.com/opencontainers/runc/libcontainer"
)

// The test binary is re-executed as each container's init, like jaild
// itself (see cmd/jaild/init.go).
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
	runtime.LockOSThread()
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper-run" {
		helperRun() // never returns
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
	if os.Geteuid() != 0 {
		t.Skip("needs root: sandboxes need namespaces and cgroups")
	}
	for _, f := range jail.Check() {
		if f.Required && !f.OK {
			t.Skipf("host lacks %s: %s", f.Name, f.Detail)
		}
	}
}

// testEnv is a private jaild installation: its own state dir and parent
// cgroup, so a daemon running on the same host is never touched.
type testEnv struct {
	StateDir, Parent string
}

func newTestEnv(t testing.TB) testEnv {
	t.Helper()
	// Under /run, not t.TempDir: the sandbox's unprivileged root must be
	// able to traverse every parent of the rootfs template.
	dir, err := os.MkdirTemp("/run", "jaild-test-")
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv{StateDir: dir, Parent: "jaild-test-" + randHex(4)}
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		env.Parent = "/" + env.Parent
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return env
}

func (e testEnv) config() jail.Config {
	return jail.Config{StateDir: e.StateDir, CgroupParent: e.Parent}
}

// newManager returns a Manager on a private installation and, at cleanup,
// closes it and asserts that nothing of it is left on the host.
func newManager(t testing.TB) *jail.Manager {
	t.Helper()
	requireHost(t)
	env := newTestEnv(t)
	m, err := jail.New(env.config())
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertClean(t, env)
	})
	return m
}

// assertClean fails t if the installation env left processes, cgroups,
// container state or uid slots behind.
func assertClean(t testing.TB, env testEnv) {
	t.Helper()
	name := filepath.Base(env.Parent)
	if procs := procsInCgroup(name); len(procs) > 0 {
		t.Errorf("processes left in cgroup %s: %v", name, describeProcs(procs))
	}
	if dirs := cgroupDirs(name); len(dirs) > 0 {
		t.Errorf("cgroups left behind: %v", dirs)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "containers")); len(ents) > 0 {
		t.Errorf("container state left behind: %d dirs in %s", len(ents), env.StateDir)
	}
	if slots := slotsOf(env.StateDir); len(slots) > 0 {
		t.Errorf("uid slots still recorded: %v", slots)
	}
}

// procsInCgroup lists host pids whose cgroup path contains name. Zombies
// are left out: an orphaned sandbox's init, once killed, waits for the
// host's pid 1 to reap it, which holds nothing but a pid.
func procsInCgroup(name string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(data), "/"+name) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// cgroupDirs lists cgroup directories named name (or below it).
func cgroupDirs(name string) []string {
	var out []string
	_ = filepath.WalkDir(cgroup.Root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			out = append(out, p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 9 {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// slotsOf lists slot files whose record points into stateDir.
func slotsOf(stateDir string) []string {
	var out []string
	ents, _ := os.ReadDir(jail.SlotDir)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(jail.SlotDir, e.Name()))
		if err != nil {
			continue
		}
		var rec struct {
			StateRoot string `json:"state_root"`
		}
		if json.Unmarshal(data, &rec) == nil && strings.HasPrefix(rec.StateRoot, stateDir+"/") {
			out = append(out, e.Name())
		}
	}
	return out
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
	spec := &jail.Spec{Command: jail.Command{
		Args:    []string{"/bin/sh", "-c", "sleep 1000 & echo started; sleep 1000"},
		Timeout: jail.MaxTimeout,
		Stdout:  lineWriter{bufio.NewWriter(os.Stdout)},
	}}
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

func describeProcs(pids []string) []string {
	var out []string
	for _, p := range pids {
		cmd, _ := os.ReadFile(filepath.Join("/proc", p, "cmdline"))
		cg, _ := os.ReadFile(filepath.Join("/proc", p, "cgroup"))
		st, _ := os.ReadFile(filepath.Join("/proc", p, "stat"))
		out = append(out, fmt.Sprintf("%s %q %q %q", p, strings.ReplaceAll(string(cmd), "\x00", " "), cg, st))
	}
	return out
}
