package files_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session/files"
)

// TestSandboxWorkspace: a real sandbox, on a real workspace, leaves
// symlinks out, a fifo, a hard link and files; the API on its Dir follows
// none of them out, and what the API writes the next sandbox can change.
func TestSandboxWorkspace(t *testing.T) {
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	for _, f := range jail.Check() {
		if f.Required && !f.OK {
			t.Skipf("host lacks %s: %s", f.Name, f.Detail)
		}
	}
	env := testenv.New(t, "jaild-ftest")
	m, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent})
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ws, err := m.NewWorkspace(1 << 20)
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	t.Cleanup(func() {
		if err := ws.Close(); err != nil {
			t.Errorf("Workspace.Close: %v", err)
		}
	})
	run := func(script string) *box.Result {
		t.Helper()
		res, err := m.Run(context.Background(), &jail.Spec{Workspace: ws, Command: box.Command{Args: []string{"/bin/sh", "-c", script}}})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		return res
	}
	if res := run(`cd /work && echo secret > f && ln f hl && ln -s /etc etc && ln -s / root && ln -s ../.. up &&
		ln -s f rel && mkfifo fifo && mkdir d && ln -s /etc/shadow d/shadow && echo ok`); res.Stdout != "ok\n" {
		t.Fatalf("sandbox setup: %+v", res)
	}
	uid, gid := ws.HostIDs()
	root := files.Root{Dir: ws.Dir(), UID: uid, GID: gid}
	if root.UID < 1<<30 {
		t.Errorf("workspace owned by host uid %d, want a sandbox range's", root.UID)
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	hd := files.NewHandler(func(*http.Request) (files.Root, error) { return root, nil }, files.Options{})
	for _, tt := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		// etc -> /etc is etc -> itself in the workspace's view.
		{"GET", "etc/passwd", "", 400, ""},
		{"GET", "root/tmp", "", 404, ""},
		{"GET", "up/etc/shadow", "", 400, ""},
		{"GET", "d/shadow", "", 400, ""},
		{"GET", "fifo", "", 409, ""},
		{"GET", "hl", "", 200, "secret\n"},
		{"GET", "rel", "", 200, "secret\n"},
		{"PUT", "etc/passwd", "pwned", 400, ""},
		// root -> / is the workspace root: /work/tmp/x.
		{"PUT", "root/tmp/x", "inside", 204, ""},
		{"GET", "tmp/x", "", 200, "inside"},
		{"DELETE", "etc/passwd", "", 400, ""},
		{"DELETE", "d", "", 204, ""},
		{"PUT", "new/file", "from the API\n", 204, ""},
	} {
		w := doTimeout(t, hd, tt.method, tt.path, []byte(tt.body))
		if w.Code != tt.status || tt.want != "" && w.Body.String() != tt.want {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, w.Code, w.Body, tt.status, tt.want)
		}
	}
	if now, _ := os.ReadFile("/etc/shadow"); string(now) != string(shadow) {
		t.Error("/etc/shadow changed")
	}
	// The sandbox sees the API's file as its own, and can change it.
	if res := run(`cat /work/new/file && echo more >> /work/new/file && stat -c '%U %a' /work/new /work/new/file && ls /work/d 2>&1 || true`); !strings.HasPrefix(res.Stdout, "from the API\nsandbox 755\nsandbox 644\n") {
		t.Errorf("sandbox after the API: %q %q", res.Stdout, res.Stderr)
	}
}
