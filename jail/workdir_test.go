package jail_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

func TestValidateWorkDir(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		ok        bool
	}{
		{name: "default", dir: box.DefaultDir, ok: true},
		{name: "workspace", dir: "/workspace", ok: true},
		{name: "nested", dir: "/home/sandbox/src", ok: true},
		{name: "punctuation", dir: "/w.s_1-2+3@x", ok: true},
		{name: "longest", dir: "/" + strings.Repeat("a", jail.MaxWorkDir-1), ok: true},
		{name: "too long", dir: "/" + strings.Repeat("a", jail.MaxWorkDir)},
		{name: "empty", dir: ""},
		{name: "root", dir: "/"},
		{name: "relative", dir: "workspace"},
		{name: "trailing slash", dir: "/workspace/"},
		{name: "dot dot", dir: "/work/../etc"},
		{name: "double slash", dir: "//workspace"},
		{name: "proc", dir: "/proc"},
		{name: "below sys", dir: "/sys/x"},
		{name: "dev", dir: "/dev/shm"},
		{name: "usr", dir: "/usr/src"},
		{name: "etc", dir: "/etc"},
		{name: "tmp", dir: "/tmp"},
		{name: "below tmp", dir: "/tmp/work"},
		{name: "merged-usr link", dir: "/bin/x"},
		{name: "lib64", dir: "/lib64"},
		{name: "colon (passwd field)", dir: "/a:b"},
		{name: "newline", dir: "/a\nb"},
		{name: "space", dir: "/my work"},
		{name: "NUL", dir: "/a\x00"},
		{name: "prefix of a system dir is fine", dir: "/usrx", ok: true},
		{name: "tmp-like name", dir: "/tmpwork", ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := jail.ValidateWorkDir(tc.dir)
			if tc.ok != (err == nil) {
				t.Fatalf("ValidateWorkDir(%q) = %v, want ok %v", tc.dir, err, tc.ok)
			}
			var ie *box.InvalidError
			if err != nil && (!errors.As(err, &ie) || ie.Field != "workdir") {
				t.Fatalf("ValidateWorkDir(%q) = %#v, want an *InvalidError of field workdir", tc.dir, err)
			}
		})
	}
}

// A Manager with another working directory puts everything there that
// would be at /work: the tmpfs, cwd, HOME, the user's home in passwd, on a
// fresh sandbox, a pooled one and a workspace's; nothing is at /work.
func TestWorkDirSandbox(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cfg := config(env)
	cfg.WorkDir = "/workspace"
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if m.WorkDir() != "/workspace" {
		t.Fatalf("WorkDir() = %q", m.WorkDir())
	}
	const script = `pwd; echo "$HOME"; echo x > f && cat /workspace/f; stat -c %U /workspace; ` +
		`grep '^sandbox:' /etc/passwd | cut -d: -f6; cd ~ && pwd; ls -d /work 2>&1 >/dev/null | grep -c 'No such'`
	const want = "/workspace\n/workspace\nx\nsandbox\n/workspace\n/workspace\n1\n"
	pool, err := m.NewPool(1, box.Limits{})
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { pool.Close() })
	ws, err := m.NewWorkspace(1 << 20)
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	pre, err := m.NewWorkspace(1<<20, jail.WithPrestart(box.Limits{}))
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	t.Cleanup(func() { pre.Close() })
	for _, tc := range []struct {
		name string
		run  func(*jail.Spec) (*box.Result, error)
	}{
		{"fresh", func(s *jail.Spec) (*box.Result, error) { return m.Run(context.Background(), s) }},
		{"pooled", func(s *jail.Spec) (*box.Result, error) {
			waitReady(t, pool)
			hits, _ := pool.Stats()
			res, err := pool.Run(context.Background(), s)
			if h, _ := pool.Stats(); h == hits {
				t.Error("the run did not take the pooled sandbox")
			}
			return res, err
		}},
		{"workspace", func(s *jail.Spec) (*box.Result, error) {
			s.Workspace = ws
			return m.Run(context.Background(), s)
		}},
		{"prestarted", func(s *jail.Spec) (*box.Result, error) {
			waitPrestarted(t, pre)
			res, err := pre.Run(context.Background(), s)
			if err == nil && !res.Prestarted {
				t.Error("the run did not take the prestarted sandbox")
			}
			return res, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.run(sh(script))
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != want || res.ExitCode != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", res.ExitCode, res.Stdout, res.Stderr, want)
			}
		})
	}
	// The workspace's file is in its host directory.
	if data, err := os.ReadFile(filepath.Join(ws.Dir(), "f")); err != nil || string(data) != "x\n" {
		t.Errorf("workspace file: %q, %v", data, err)
	}
	// /work is outside the writable dirs now; /workspace/sub and /tmp are in.
	for _, tc := range []struct {
		dir  string
		want string // "" : invalid
	}{
		{dir: "/work"},
		{dir: "/tmp", want: "/tmp\n"},
		{dir: "/workspace/", want: "/workspace\n"},
	} {
		res, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"pwd"}, Dir: tc.dir}})
		switch {
		case tc.want == "" && !box.IsInvalid(err):
			t.Errorf("Dir %s: %v, want an *InvalidError", tc.dir, err)
		case tc.want != "" && (err != nil || res.Stdout != tc.want):
			t.Errorf("Dir %s: %v, %+v; want %q", tc.dir, err, res, tc.want)
		}
	}
}
