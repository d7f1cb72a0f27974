package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestInputSessionFields: input.session_id is there when the request runs
// in a session and undefined otherwise; input.background is always there.
func TestInputSessionFields(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte(`package sandbox.main

allow if {
	input.session_id == "s-1"
	input.background == true
}

allow if {
	not input.session_id
	input.background == false
}
`), 0o644))
	e := openExamples(t, fakeRoot(t), Options{Dir: dir})
	for _, tc := range []struct {
		in    Input
		allow bool
	}{
		{Input{Command: "date", SessionID: "s-1", Background: true}, true},
		{Input{Command: "date"}, true},
		{Input{Command: "date", SessionID: "s-1"}, false},
		{Input{Command: "date", Background: true}, false},
	} {
		if d := e.Decide(context.Background(), "", tc.in); d.Allow != tc.allow {
			t.Errorf("session %q background %v: allow %v (%s)", tc.in.SessionID, tc.in.Background, d.Allow, d.Message)
		}
	}
}
