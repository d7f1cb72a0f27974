package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
)

// writePolicy writes files into a new directory and returns it.
func writePolicy(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const testRouter = `package sandbox.main

default allow := false

allow if data.sandbox[input.command].allow
`

const testDate = `package sandbox.date

default allow := false

allow if count(input.args) == 0
`

// TestPolicyTest runs jaild policy test through the lean jaild, which
// executes jaild-server: the examples' Rego tests pass, a broken test fails
// the command, and a set that does not load is told apart from both.
func TestPolicyTest(t *testing.T) {
	broken := writePolicy(t, map[string]string{
		"main.rego": testRouter,
		"date.rego": testDate,
		"date_test.rego": `package sandbox.date_test

test_no_args if data.sandbox.main.allow with input as {"command": "date", "args": []}

# Wrong on purpose: date with an argument is denied.
test_with_args if data.sandbox.main.allow with input as {"command": "date", "args": ["-u"]}
`,
	})
	noLoad := writePolicy(t, map[string]string{"main.rego": "package sandbox.main\n\nallow if {"})
	tests := []struct {
		name     string
		dir      string
		wantCode int
		want     []string
	}{
		{name: "examples pass", dir: "../../examples/policy", want: []string{"PASS  data.sandbox.main_test.", "PASS: "}},
		{name: "a broken test fails", dir: broken, wantCode: 1,
			want: []string{"PASS  data.sandbox.date_test.test_no_args", "FAIL  data.sandbox.date_test.test_with_args", "FAIL: 1/2"}},
		{name: "a set that does not load", dir: noLoad, wantCode: 2, want: []string{"policy test", "parse main.rego"}},
		{name: "no such dir", dir: filepath.Join(noLoad, "missing"), wantCode: 2, want: []string{"no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(jaildBin, "policy", "test", tt.dir).CombinedOutput()
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", got, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "FAIL") != (tt.wantCode == 1) {
				t.Errorf("FAIL in the output does not match exit %d:\n%s", tt.wantCode, out)
			}
		})
	}
	out, err := exec.Command(jaildBin, "policy", "test").CombinedOutput()
	if exitCode(err) != api.ExitUsage {
		t.Errorf("jaild policy test without DIR: exit %d, want %d:\n%s", exitCode(err), api.ExitUsage, out)
	}
}

// TestPolicyEval decides input documents with jaild policy eval: the exit
// status is the decision, and the printed input carries the resolution (in
// the sandboxes' root, as the daemon's) and the shell parse.
func TestPolicyEval(t *testing.T) {
	in := newInstall(t)
	dir := writePolicy(t, map[string]string{"main.rego": testRouter, "date.rego": testDate})
	noLoad := writePolicy(t, map[string]string{"main.rego": "package sandbox.other\n"})
	inputFile := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(inputFile, []byte(`{"command":"date"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A program on this host that no sandbox has, in a directory only
	// root may change (the resolution marks others' as writable).
	hostOnly := filepath.Join(in.StateDir, "host-only-tool")
	if err := os.WriteFile(hostOnly, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hostOnlyInput := `{"command":"` + hostOnly + `"}`
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantResult string
		wantOut    string
		check      func(t *testing.T, in map[string]any)
	}{
		{name: "allowed from a file", args: []string{dir, "--input", inputFile}, wantResult: "allow",
			check: func(t *testing.T, in map[string]any) {
				if p, _ := in["path"].(string); !strings.HasSuffix(p, "/date") {
					t.Errorf("path %q", p)
				}
				if h, _ := in["hash"].(string); len(h) != 64 {
					t.Errorf("hash %q", h)
				}
			}},
		{name: "denied", args: []string{dir, "--input", "-"}, stdin: `{"command":"date","args":["-u"]}`, wantCode: 1, wantResult: "deny"},
		{name: "flag before DIR", args: []string{"--input", "-", dir}, stdin: `{"command":"date"}`, wantResult: "allow"},
		{name: "shell parse", args: []string{dir, "--input=-"}, stdin: `{"shell":"date; rm -rf /"}`, wantCode: 1, wantResult: "deny",
			check: func(t *testing.T, in map[string]any) {
				sh, _ := in["shell"].(map[string]any)
				cmds, _ := sh["commands"].([]any)
				var names []string
				for _, c := range cmds {
					names = append(names, c.(map[string]any)["command"].(string))
				}
				if strings.Join(names, ",") != "date,rm" {
					t.Errorf("shell commands %v, want date,rm", names)
				}
			}},
		// The router is the convention's, written for argv: each simple
		// command is asked about in turn.
		{name: "shell each", args: []string{dir, "--input", "-"}, stdin: `{"shell":"date && date"}`, wantResult: "allow", wantOut: `"shell_mode": "each"`},
		{name: "shell each denied", args: []string{dir, "--input", "-"}, stdin: `{"shell":"date; rm -rf /"}`, wantCode: 1, wantResult: "deny", wantOut: `"denied_command": "rm -rf /"`},
		{name: "shell whole", args: []string{"--policy-shell-mode", "whole", dir, "--input", "-"}, stdin: `{"shell":"date"}`, wantCode: 1, wantResult: "deny", wantOut: `"shell_mode": "whole"`},
		{name: "unresolvable", args: []string{dir, "--input", "-"}, stdin: `{"command":"no-such-command-jaild"}`, wantCode: 1, wantResult: "resolve_error"},
		{name: "on the host only", args: []string{dir, "--input", "-"}, stdin: hostOnlyInput, wantCode: 1, wantResult: "resolve_error"},
		{name: "on the host only, resolved on the host's root", args: []string{"--rootfs", "/", dir, "--input", "-"}, stdin: hostOnlyInput, wantCode: 1, wantResult: "deny",
			check: func(t *testing.T, in map[string]any) {
				if p, _ := in["path"].(string); p != hostOnly {
					t.Errorf("path %q, want %q", p, hostOnly)
				}
			}},
		{name: "set does not load", args: []string{noLoad, "--input", "-"}, stdin: `{"command":"date"}`, wantCode: 2, wantResult: "deny_all"},
		{name: "no input", args: []string{dir}, wantCode: api.ExitUsage},
		{name: "not JSON", args: []string{dir, "--input", "-"}, stdin: `date`, wantCode: api.ExitUsage},
		{name: "unknown field", args: []string{dir, "--input", "-"}, stdin: `{"cmd":"date"}`, wantCode: api.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(jaildBin, append([]string{"policy", "eval", "--state-dir", in.StateDir}, tt.args...)...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s%s", got, tt.wantCode, out, stderr.String())
			}
			if tt.wantResult == "" {
				return
			}
			var d struct {
				Allow    bool           `json:"allow"`
				Result   string         `json:"result"`
				Revision string         `json:"revision"`
				Input    map[string]any `json:"input"`
			}
			if err := json.Unmarshal(out, &d); err != nil {
				t.Fatalf("output is not a decision: %v\n%s", err, out)
			}
			if d.Result != tt.wantResult || d.Allow != (tt.wantCode == 0) {
				t.Errorf("result %q allow %v, want %q:\n%s", d.Result, d.Allow, tt.wantResult, out)
			}
			if (d.Revision == "") != (tt.wantResult == "deny_all") {
				t.Errorf("revision %q with result %q", d.Revision, d.Result)
			}
			if !strings.Contains(string(out), tt.wantOut) {
				t.Errorf("output does not have %s:\n%s", tt.wantOut, out)
			}
			if tt.check != nil {
				tt.check(t, d.Input)
			}
		})
	}
}
