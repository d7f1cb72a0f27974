package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveView: commands resolve in the request's view of the sandbox,
// /work being the session's workspace, and an answer the sandbox can
// change (a file in /work or /tmp, or a lookup through them) is Writable
// and has no hash.
func TestResolveView(t *testing.T) {
	root := fakeRoot(t)
	r := NewRoot(root)
	ws := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "bin/date"), []byte("#!/bin/true fake date\n"), 0o755))
	must(t, os.Symlink("/usr/bin/id", filepath.Join(ws, "bin/idlink")))
	// A link the sandbox wrote to a host path resolves in the sandbox's
	// namespace (the root's /etc), never on the host.
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "evil"), []byte("#!/bin/true evil\n"), 0o755))
	must(t, os.Symlink(filepath.Join(outside, "evil"), filepath.Join(ws, "bin/out")))
	must(t, os.Symlink(outside, filepath.Join(ws, "outdir")))
	for _, tc := range []struct {
		name, ws, cmd, path, cwd string
		want                     string
		writable                 bool
		err                      string
	}{
		{name: "default PATH", ws: ws, cmd: "date", want: "/usr/bin/date"},
		{name: "PATH into the workspace", ws: ws, cmd: "date", path: "/work/bin:/usr/bin", want: "/work/bin/date", writable: true},
		{name: "shadowable by the workspace", ws: ws, cmd: "id", path: "/work/bin:/usr/bin", want: "/usr/bin/id", writable: true},
		{name: "shadowable by /tmp", ws: ws, cmd: "date", path: "/tmp:/usr/bin", want: "/usr/bin/date", writable: true},
		{name: "relative PATH entry", ws: ws, cmd: "date", path: "bin:/usr/bin", want: "/work/bin/date", writable: true},
		{name: "a path in the workspace", ws: ws, cmd: "/work/bin/date", want: "/work/bin/date", writable: true},
		{name: "relative to cwd", ws: ws, cmd: "./bin/date", want: "/work/bin/date", writable: true},
		{name: "link out of the workspace", ws: ws, cmd: "/work/bin/idlink", want: "/usr/bin/id", writable: true},
		{name: "link to a host path", ws: ws, cmd: "/work/bin/out", err: "no such file", writable: true},
		{name: "through a host dir link", ws: ws, cmd: "/work/outdir/evil", err: "no such file", writable: true},
		{name: "dotdot out of /work (looked up through it)", ws: ws, cmd: "/work/../usr/bin/id", want: "/usr/bin/id", writable: true},
		{name: "no workspace: /work is empty", cmd: "/work/bin/date", err: "no such file", writable: true},
		{name: "/tmp is empty", ws: ws, cmd: "/tmp/date", err: "no such file", writable: true},
		{name: "not found through /work", ws: ws, cmd: "nosuch", path: "/work/bin:/usr/bin", err: "not found", writable: true},
		{name: "/proc is the sandbox's", ws: ws, cmd: "/proc/self/exe", err: "no such file", writable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := r.ResolveIn(tc.ws, tc.cmd, tc.path, tc.cwd)
			if res.Writable != tc.writable {
				t.Errorf("Writable = %v, want %v", res.Writable, tc.writable)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ResolveIn(%s) = %+v, %v; want error %q", tc.cmd, res, err, tc.err)
				}
				return
			}
			if err != nil || res.Path != tc.want {
				t.Fatalf("ResolveIn(%s) = %+v, %v; want %s", tc.cmd, res, err, tc.want)
			}
			if inWS := strings.HasPrefix(res.Path, "/work/"); inWS != (res.Hash == "") || !inWS && len(res.Hash) != 64 {
				t.Errorf("hash %q for %s", res.Hash, res.Path)
			}
		})
	}
}

// TestDecideInView: the engine decides on the file that will run in the
// session's view, and the example set denies what the sandbox can change.
func TestDecideInView(t *testing.T) {
	root := fakeRoot(t)
	e := openExamples(t, root, Options{})
	ws := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "bin/date"), []byte("#!/bin/true fake date\n"), 0o755))
	for _, tc := range []struct {
		name  string
		in    Input
		allow bool
		path  string
	}{
		{name: "date", in: Input{Command: "date"}, allow: true, path: "/usr/bin/date"},
		{name: "date from the workspace", in: Input{Command: "date", Env: map[string]string{"PATH": "/work/bin:/usr/bin"}}, path: "/work/bin/date"},
		{name: "shell date from the workspace", in: Input{Shell: &Shell{Source: "date"}, Env: map[string]string{"PATH": "/work/bin:/usr/bin"}}},
		{name: "shell date shadowable by /tmp", in: Input{Shell: &Shell{Source: "date"}, Env: map[string]string{"PATH": "/tmp:/usr/bin"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Workspace = ws
			d := e.Decide(context.Background(), "", tc.in)
			if d.Allow != tc.allow {
				t.Errorf("allow %v (%s), want %v", d.Allow, d.Message, tc.allow)
			}
			if tc.path != "" && d.Input.Path != tc.path {
				t.Errorf("path %q, want %q", d.Input.Path, tc.path)
			}
		})
	}
}

// TestActions: requests that are not runs ask ActionQuery; a set that does
// not define it allows them, one that does decides, deny-all denies.
func TestActions(t *testing.T) {
	root := fakeRoot(t)
	runsOnly := t.TempDir()
	must(t, os.WriteFile(filepath.Join(runsOnly, "main.rego"), []byte("package sandbox.main\nallow if input.command == \"date\"\n"), 0o644))
	withActions := t.TempDir()
	must(t, os.WriteFile(filepath.Join(withActions, "main.rego"), []byte(`package sandbox.main
allow if {
	input.action == "run"
	input.command == "date"
}
default allow_action := false
allow_action if input.action == "files.read"
allow_action if {
	input.action == "files.write"
	not startswith(input.file, "/work/bin/")
}
`), 0o644))
	broken := t.TempDir()
	must(t, os.WriteFile(filepath.Join(broken, "main.rego"), []byte("package sandbox.main\nallow if {"), 0o644))
	write := Input{Action: ActionFilesWrite, File: "/work/bin/ls", Caller: "c", SessionID: "s"}
	for _, tc := range []struct {
		name, dir string
		in        Input
		allow     bool
		result    Result
	}{
		{name: "runs only: run", dir: runsOnly, in: Input{Command: "date"}, allow: true, result: Allowed},
		{name: "runs only: files.write", dir: runsOnly, in: write, allow: true, result: Allowed},
		{name: "runs only: session.env", dir: runsOnly, in: Input{Action: ActionSessionEnv, Env: map[string]string{"LD_PRELOAD": "/work/x.so"}}, allow: true, result: Allowed},
		{name: "actions: run", dir: withActions, in: Input{Command: "date"}, allow: true, result: Allowed},
		{name: "actions: files.write denied", dir: withActions, in: write, result: Denied},
		{name: "actions: files.write elsewhere", dir: withActions, in: Input{Action: ActionFilesWrite, File: "/work/a"}, allow: true, result: Allowed},
		{name: "actions: files.read", dir: withActions, in: Input{Action: ActionFilesRead, File: "/work/bin/ls"}, allow: true, result: Allowed},
		{name: "actions: session.create", dir: withActions, in: Input{Action: ActionSessionCreate}, result: Denied},
		{name: "deny-all: files.write", dir: broken, in: write, result: DenyAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Open(Options{Dir: tc.dir, Resolver: NewRoot(root), NoWatch: true})
			must(t, err)
			t.Cleanup(func() { e.Close() })
			d := e.Decide(context.Background(), "", tc.in)
			if d.Allow != tc.allow || d.Result != tc.result {
				t.Errorf("allow %v %s (%s), want %v %s", d.Allow, d.Result, d.Message, tc.allow, tc.result)
			}
			if tc.result == Denied && d.Message != "Not allowed by policy: "+tc.in.Action+strings.TrimSuffix(" "+tc.in.File, " ") {
				t.Errorf("message %q", d.Message)
			}
		})
	}
}
