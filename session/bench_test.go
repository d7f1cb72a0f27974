package session_test

import (
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

// BenchmarkCall compares a call in a session with a one-shot call on the
// same jail Manager, in the same run:
//
//	go test -tags seccomp,urfave_cli_no_docs -run '^$' -bench Call -benchtime 100x ./session/
func BenchmarkCall(b *testing.B) {
	requireHost(b)
	m, jm := newManagers(b)
	s, err := m.Create(bg, session.Options{Owner: caller.FromToken("bench")})
	if err != nil {
		b.Fatal(err)
	}
	calls := []struct {
		name string
		run  func() (*box.Result, error)
	}{
		{"oneshot-sh", func() (*box.Result, error) {
			return jm.Run(bg, &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "true"}}})
		}},
		{"oneshot-bash", func() (*box.Result, error) {
			return jm.Run(bg, &jail.Spec{Command: box.Command{Args: []string{"/bin/bash", "-c", "true"}}})
		}},
		{"session-argv", func() (*box.Result, error) {
			return s.Run(bg, &session.Call{Command: box.Command{Args: []string{"/bin/sh", "-c", "true"}}})
		}},
		{"session-shell-sh", func() (*box.Result, error) { return s.Run(bg, &session.Call{Shell: "true"}) }},
		{"session-shell-bash", func() (*box.Result, error) {
			return s.Run(bg, &session.Call{Shell: "true", ShellPath: "/bin/bash"})
		}},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if res, err := c.run(); err != nil || res.ExitCode != 0 {
					b.Fatal(err, res)
				}
			}
		})
	}
}
