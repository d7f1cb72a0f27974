package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
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

// TestInputValue: the document a policy sees is the Input as JSON, with
// every field the JSON leaves out when empty there all the same (action
// "run" when empty, cwd, caller, front_end, shell.reasons, and each
// command's via and dynamic).
func TestInputValue(t *testing.T) {
	cmd := Command{Command: "date", Path: "/usr/bin/date", Hash: "ab", Args: []string{"+%s"}}
	for _, in := range []Input{
		{Command: "git", Path: "/usr/bin/git", Hash: "cd", Args: []string{"commit", "-m", "x"}, Env: map[string]string{"A": "1", "B": ""}},
		{Command: "sh", Args: []string{}, Env: map[string]string{}, Writable: true, Cwd: "/work/x", Caller: "tok", FrontEnd: "mcp:bash",
			SessionID: "s-1", Background: true, Limits: map[string]any{"timeout_ms": 5000, "net": "none", "deep": map[string]any{"a": []any{1.5, true}}},
			Shell: &Shell{Source: "date +%s | f", Commands: []Command{cmd, {Command: "$x", Args: []string{"$y"}, Via: []string{"env", "sh -c"}, Dynamic: true, Writable: true}},
				Dynamic: true, Reasons: []string{"a name that is not a literal"}, Functions: []Function{{Name: "f", Calls: []string{"f", "date"}}}}},
		{Command: "sh", Args: []string{"-c", ""}, Env: map[string]string{}, Shell: &Shell{Source: "", Commands: []Command{}, Functions: []Function{}}},
		{Action: ActionFilesWrite, File: "/work/a", Env: map[string]string{}, Args: []string{}},
		{Action: ActionSessionEnv, Env: map[string]string{"K": "v"}, Unset: []string{"X", "Y"}, Args: []string{}},
	} {
		got := in.value()
		b, err := json.Marshal(in)
		must(t, err)
		var doc map[string]any
		must(t, json.Unmarshal(b, &doc))
		if doc["action"] == nil {
			doc["action"] = ActionRun
		}
		for _, k := range []string{"cwd", "caller", "front_end"} {
			if doc[k] == nil {
				doc[k] = ""
			}
		}
		if sh, ok := doc["shell"].(map[string]any); ok {
			if sh["reasons"] == nil {
				sh["reasons"] = []any{}
			}
			for _, c := range sh["commands"].([]any) {
				c := c.(map[string]any)
				if c["via"] == nil {
					c["via"] = []any{}
				}
				if c["dynamic"] == nil {
					c["dynamic"] = false
				}
			}
		}
		want, err := ast.InterfaceToValue(doc)
		must(t, err)
		if got.Compare(want) != 0 {
			t.Errorf("input %s:\n got %v\nwant %v", b, got, want)
		}
	}
}
