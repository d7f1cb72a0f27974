package session_test

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/session"
)

// TestWorkDir: with another working directory, a session's directory,
// its fallback, HOME and Options.Cwd all follow it; /work is no place.
func TestWorkDir(t *testing.T) {
	if _, err := session.New(nil, session.Config{WorkDir: "/etc/x"}); !box.IsInvalid(err) {
		t.Errorf("session.New with WorkDir /etc/x = %v, want an *InvalidError", err)
	}
	m, _ := newManager(t, session.Config{WorkDir: "/workspace"})
	owner := caller.FromToken("a")
	if _, err := m.Create(bg, session.Options{Owner: owner, Cwd: "/work"}); !box.IsInvalid(err) || !strings.Contains(err.Error(), "/workspace") {
		t.Errorf("Create with Cwd /work = %v, want an *InvalidError naming /workspace", err)
	}
	s := create(t, m, session.Options{Owner: owner})
	t.Cleanup(func() { m.Delete(owner, s.ID()) })
	if got := s.Info().Cwd; got != "/workspace" {
		t.Errorf("a new session's cwd is %q, want /workspace", got)
	}
	for _, st := range []struct{ script, want string }{
		{`pwd; echo "$HOME"; ls -d /work 2>/dev/null || echo no work`, "/workspace\n/workspace\nno work\n"},
		{"mkdir -p src/deep && echo hi > src/f && cd src/deep", ""},
		{"pwd; cat ../f; cd ~; cd src", "/workspace/src/deep\nhi\n"},
		{"pwd; cd /tmp", "/workspace/src\n"},
		{"pwd; cd src/deep", "/workspace\n"},
		{"rmdir /workspace/src/deep", ""},
		{"pwd", "/workspace\n"},
	} {
		if res := shell(t, s, st.script); res.Stdout != st.want || res.ExitCode != 0 {
			t.Fatalf("%q: stdout %q, exit %d, stderr %q; want %q", st.script, res.Stdout, res.ExitCode, res.Stderr, st.want)
		}
	}
	if info := s.Info(); info.Cwd != "/workspace" || strings.Contains(strings.Join(info.Env, ","), "HOME=") {
		t.Errorf("Info: cwd %q env %q", info.Cwd, info.Env)
	}
	s2 := create(t, m, session.Options{Owner: owner, Cwd: "/workspace/x/.."})
	t.Cleanup(func() { m.Delete(owner, s2.ID()) })
	if got := s2.Info().Cwd; got != "/workspace" {
		t.Errorf("Cwd /workspace/x/.. is %q, want /workspace", got)
	}
}
