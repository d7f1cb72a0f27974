package session_test

import (
	"context"
	"errors"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

// TestCheck: Call.Check is asked about the call as it will run (the
// session's environment and directory merged with the call's, the
// script without the session's trap, the workspace), and a refusal runs
// nothing, in a call or a job.
func TestCheck(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Env: []string{"FROM_SESSION=s"}})
	t.Cleanup(func() { m.Delete(caller.FromToken("a"), s.ID()) })
	shell(t, s, "mkdir -p /work/sub && cd /work/sub && export PATH=/work/bin:$PATH")

	var got *jail.Spec
	var ws string
	allow := func(_ context.Context, spec *jail.Spec, workspace string) error {
		c := *spec
		got, ws = &c, workspace
		return nil
	}
	if _, err := s.Run(bg, &session.Call{Shell: "true", Command: box.Command{Env: []string{"C=c"}}, Check: allow}); err != nil {
		t.Fatal(err)
	}
	if got == nil || ws != s.Dir() || got.Dir != "/work/sub" ||
		!slices.Equal(got.Args, []string{"/bin/sh", "-c", "true"}) ||
		!slices.Contains(got.Env, "FROM_SESSION=s") || !slices.Contains(got.Env, "C=c") ||
		!slices.ContainsFunc(got.Env, func(kv string) bool { return len(kv) > 15 && kv[:15] == "PATH=/work/bin:" }) {
		t.Fatalf("Check saw %+v on %q", got, ws)
	}

	denied := errors.New("denied")
	deny := func(context.Context, *jail.Spec, string) error { return denied }
	if _, err := s.Run(bg, &session.Call{Shell: "touch /work/ran", Check: deny}); !errors.Is(err, denied) {
		t.Errorf("denied call: %v", err)
	}
	if _, err := s.Start(bg, &session.Call{Command: box.Command{Args: []string{"touch", "/work/ran"}}, Check: deny}); !errors.Is(err, denied) {
		t.Errorf("denied job: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir(), "ran")); err == nil {
		t.Error("a denied call ran")
	}
	if info := s.Info(); info.Jobs != 0 {
		t.Errorf("a denied job was kept: %+v", info)
	}
}
