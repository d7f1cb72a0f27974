package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/session"
)

// waitPrestarted waits until a sandbox waits for s's next call.
func waitPrestarted(t *testing.T, s *session.Session) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !session.Prestarted(s) {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox was prestarted for the session")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPrestartedCalls: a session's calls and jobs run in the sandbox
// started for them on its workspace (Result.Prestarted, which only a
// prestarted sandbox's run sets), with the session's directory,
// environment and shell state report working as in a fresh one; a call
// with another memory limit is still served, one with another tmpfs size
// runs in a fresh sandbox; with Config.NoPrestart no call is prestarted.
func TestPrestartedCalls(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Env: []string{"S=s"}})
	tests := []struct {
		name         string
		call         session.Call
		wantOut      string
		wantCode     int
		wantPrestart bool
	}{
		{"shell state report", session.Call{Shell: "mkdir -p /work/d && cd /work/d && export A=1 && echo hi > f; exit 4"}, "", 4, true},
		{"the directory and exports carried", session.Call{Shell: `pwd; echo "$A $S"; cat f`}, "/work/d\n1 s\nhi\n", 0, true},
		{"an argv call in the session's directory", session.Call{Command: box.Command{Args: []string{"pwd"}}}, "/work/d\n", 0, true},
		{"the call's own directory (a shell reports it) and env", session.Call{Shell: `pwd; echo "$A $B"`, Command: box.Command{Dir: "/work", Env: []string{"B=2"}}}, "/work\n1 2\n", 0, true},
		{"another memory limit", session.Call{Shell: "echo $A", Limits: box.Limits{Memory: 128 << 20}}, "1\n", 0, true},
		{"another tmpfs size: a fresh sandbox", session.Call{Shell: "echo $A; pwd", Limits: box.Limits{TmpfsSize: 8 << 20}}, "1\n/work\n", 0, false},
		{"an unset export carries over", session.Call{Shell: "unset A; cd /work"}, "", 0, true},
		{"after it", session.Call{Shell: `pwd; echo "[$A]"`}, "/work\n[]\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			waitPrestarted(t, s)
			res, err := s.Run(bg, &tc.call)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Stdout != tc.wantOut || res.ExitCode != tc.wantCode || res.Prestarted != tc.wantPrestart {
				t.Errorf("got %q exit %d prestarted %v (stderr %q), want %q exit %d prestarted %v",
					res.Stdout, res.ExitCode, res.Prestarted, res.Stderr, tc.wantOut, tc.wantCode, tc.wantPrestart)
			}
		})
	}

	t.Run("a job", func(t *testing.T) {
		waitPrestarted(t, s)
		id, err := s.Start(bg, &session.Call{Shell: "pwd; echo job"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		if err := s.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		st, err := s.Job(id, session.Offsets{})
		if err != nil || st.Result == nil || !st.Result.Prestarted || st.Stdout != "/work\njob\n" {
			t.Errorf("job: %v %+v %+v", err, st, st.Result)
		}
	})

	t.Run("NoPrestart", func(t *testing.T) {
		m, _ := newManager(t, session.Config{NoPrestart: true})
		s := create(t, m, session.Options{Owner: caller.FromToken("a")})
		for range 2 {
			if res := shell(t, s, "true"); res.Prestarted {
				t.Errorf("a prestarted call with NoPrestart: %+v", res)
			}
		}
		if session.Prestarted(s) {
			t.Error("a sandbox waits for a session with NoPrestart")
		}
	})
}

// TestPrestartIsolation: a fork bomb in one call leaves the next call, on
// the next prestarted sandbox, working; that sandbox does not see the
// previous call's processes, and a server left by a job is reachable
// (the network namespace is the session's) while its process is not
// visible.
func TestPrestartIsolation(t *testing.T) {
	m, _ := newManager(t, session.Config{})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Limits: box.Limits{Pids: 32}})
	waitPrestarted(t, s)
	res, err := s.Run(bg, &session.Call{Shell: `sleep 1000 & b() { b | b & }; b; sleep 2`, Command: box.Command{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Prestarted || !res.PidsLimitHit {
		t.Fatalf("fork bomb: prestarted %v, pids limit hit %v", res.Prestarted, res.PidsLimitHit)
	}
	waitPrestarted(t, s)
	res = shell(t, s, `cat /proc/[0-9]*/cmdline | tr '\0' ' '; echo; echo alive`)
	if !res.Prestarted || !strings.HasSuffix(res.Stdout, "\nalive\n") || strings.Contains(res.Stdout, "sleep") {
		t.Errorf("after the bomb: prestarted %v, %q (stderr %q)", res.Prestarted, res.Stdout, res.Stderr)
	}
}
