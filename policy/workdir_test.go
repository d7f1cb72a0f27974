package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveWorkDir: a Root for sandboxes whose working directory is
// /workspace sees the workspace there, defaults cwd to it and marks what
// is found through it Writable; /work is the read-only root's, like /usr.
func TestResolveWorkDir(t *testing.T) {
	root := fakeRoot(t) // has an empty /work directory, as a prepared root may
	r := NewRoot(root).WithWorkDir("/workspace")
	if r.WorkDir() != "/workspace" {
		t.Fatalf("WorkDir() = %q", r.WorkDir())
	}
	ws := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "bin/date"), []byte("#!/bin/true fake date\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "work/tool"), []byte("#!/bin/true tool\n"), 0o755))
	for _, tc := range []struct {
		name, ws, cmd, path, cwd string
		want                     string
		writable                 bool
		err                      string
	}{
		{name: "default PATH", ws: ws, cmd: "date", want: "/usr/bin/date"},
		{name: "PATH into the workspace", ws: ws, cmd: "date", path: "/workspace/bin:/usr/bin", want: "/workspace/bin/date", writable: true},
		{name: "relative to the default cwd", ws: ws, cmd: "./bin/date", want: "/workspace/bin/date", writable: true},
		{name: "relative PATH entry", ws: ws, cmd: "date", path: "bin:/usr/bin", want: "/workspace/bin/date", writable: true},
		{name: "no workspace: empty", cmd: "/workspace/bin/date", err: "no such file", writable: true},
		{name: "/tmp still writable", ws: ws, cmd: "/tmp/date", err: "no such file", writable: true},
		{name: "/work is the root's", ws: ws, cmd: "/work/tool", want: "/work/tool"},
		{name: "/work on PATH is not writable", ws: ws, cmd: "tool", path: "/work", want: "/work/tool"},
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
			if (res.Hash == "") != tc.writable {
				t.Errorf("hash %q with Writable %v", res.Hash, res.Writable)
			}
		})
	}
}
