package session_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

// TestWorkspaceRoot: over a jail whose workspace root is outside its state
// dir, a session's /work is there (Dir), what a call writes is there, the
// working directory it leaves carries over (found by its path below Dir),
// and Delete removes it.
func TestWorkspaceRoot(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-stest")
	root := env.WithWorkspaceRoot(t)
	jm, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent, WorkspaceRoot: root})
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := jm.Close(); err != nil {
			t.Errorf("jail Close: %v", err)
		}
	})
	m, err := session.New(session.Local(jm), session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("session Close: %v", err)
		}
	})
	s := create(t, m, session.Options{Owner: caller.FromToken("me")})
	if filepath.Dir(s.Dir()) != root {
		t.Fatalf("Dir %s, want one in %s", s.Dir(), root)
	}
	if res := shell(t, s, "mkdir -p sub && echo hi > sub/f && cd sub"); res.ExitCode != 0 {
		t.Fatalf("first call: %+v", res)
	}
	if res := shell(t, s, "pwd; cat f"); res.Stdout != "/work/sub\nhi\n" {
		t.Errorf("second call: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(s.Dir(), "sub", "f")); err != nil || string(data) != "hi\n" {
		t.Errorf("on the host: %q, %v", data, err)
	}
	if err := m.Delete(caller.FromToken("me"), s.ID()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(root); len(ents) > 0 {
		t.Errorf("after Delete the root holds %v", ents)
	}
}
