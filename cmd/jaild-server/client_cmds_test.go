package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/sessionfake"
)

// fakeDaemon starts the fake daemon with a token, and points the client
// commands at it through their environment variables.
func fakeDaemon(t *testing.T) *sessionfake.Server {
	t.Helper()
	srv := sessionfake.New(t)
	srv.Token = "tok"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("# mine\nme:tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAILD_SERVER", srv.URL)
	t.Setenv("JAILD_TOKEN_FILE", file)
	t.Setenv("JAILD_SESSION", "")
	return srv
}

// jaild runs the command line args in-process and returns its stdout,
// stderr and exit status, as command.Main would exit.
func jaild(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.App{
		Name:           "jaild",
		Commands:       []*cli.Command{sessionCommand, jobsCommand, cpCommand, remoteCommand},
		Writer:         &out,
		ErrWriter:      &errOut,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"jaild"}, args...))
	code := 0
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &ec):
		code = ec.ExitCode()
		errOut.WriteString(ec.Error())
	case err != nil:
		code = api.ExitUsage
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

func TestSessionCommands(t *testing.T) {
	srv := fakeDaemon(t)
	out, errOut, code := jaild(t, "session", "new", "--ttl", "90s", "--env", "A=1", "--env", "B=x=y", "--cwd", "/work/src")
	if code != 0 || out != "s1\n" {
		t.Fatalf("session new: %d %q %q", code, out, errOut)
	}
	if _, _, code := jaild(t, "session", "new"); code != 0 {
		t.Fatalf("second session new: %d", code)
	}
	out, _, code = jaild(t, "session", "ls")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, "s1 ") || !strings.Contains(out, "/work/src") || !strings.Contains(out, "s2 ") {
		t.Errorf("session ls: %d %q", code, out)
	}
	if _, errOut, code := jaild(t, "session", "rm", "s1"); code != 0 || srv.Dir("s1") != "" {
		t.Errorf("session rm: %d %q", code, errOut)
	}
	if _, errOut, code := jaild(t, "session", "rm", "s1", "s2"); code != exitRefused || !strings.Contains(errOut, "s1") || srv.Dir("s2") != "" {
		t.Errorf("session rm of a removed one and another: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"session", "new", "extra"},
		{"session", "new", "--env", "NOEQUALS"},
		{"session", "new", "--ttl", "10ms"},
		{"session", "rm"},
	} {
		if _, errOut, code := jaild(t, args...); code != api.ExitUsage || errOut == "" {
			t.Errorf("%q: %d %q, want a usage error", args, code, errOut)
		}
	}
	t.Setenv("JAILD_TOKEN_FILE", "")
	if _, errOut, code := jaild(t, "session", "ls"); code != api.ExitUsage || !strings.Contains(errOut, "unauthorized") {
		t.Errorf("without a token: %d %q", code, errOut)
	}
	t.Setenv("JAILD_SERVER", "http://"+closedAddr(t))
	if _, errOut, code := jaild(t, "session", "ls"); code != api.ExitInternal {
		t.Errorf("no daemon: %d %q", code, errOut)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestJobsCommand(t *testing.T) {
	srv := fakeDaemon(t)
	if _, _, code := jaild(t, "session", "new"); code != 0 {
		t.Fatal("session new failed")
	}
	srv.AddJob("s1", api.Job{JobID: "j1", Command: []string{"make", "all"}, State: "running"}, "hello, world\n", "warning\n")
	out, _, code := jaild(t, "jobs", "s1")
	if code != 0 || !strings.Contains(out, "j1") || !strings.Contains(out, "make all") || !strings.Contains(out, "running") {
		t.Errorf("jobs s1: %d %q", code, out)
	}
	// Without --follow: what there is now (the fake answers 4 bytes).
	if out, _, code := jaild(t, "jobs", "s1", "j1"); code != 0 || out != "hell" {
		t.Errorf("jobs s1 j1: %d %q", code, out)
	}
	out, errOut, code := jaild(t, "jobs", "s1", "j1", "--follow")
	if code != 3 || out != "hello, world\n" || errOut != "warning\n" {
		t.Errorf("jobs s1 j1 --follow: %d %q %q", code, out, errOut)
	}
	if _, _, code := jaild(t, "jobs", "s1", "nope"); code != exitRefused {
		t.Errorf("a missing job: %d", code)
	}
	if _, _, code := jaild(t, "jobs", "--follow", "s1"); code != api.ExitUsage {
		t.Errorf("--follow without a job: %d", code)
	}
	if _, _, code := jaild(t, "jobs"); code != api.ExitUsage {
		t.Errorf("jobs without a session: %d", code)
	}
}

func TestRemoteSession(t *testing.T) {
	srv := fakeDaemon(t)
	if _, _, code := jaild(t, "session", "new"); code != 0 {
		t.Fatal("session new failed")
	}
	if _, errOut, code := jaild(t, "remote", "--no-stdin", "--session", "s1", "--", "true"); code != 0 {
		t.Fatalf("remote --session: %d %q", code, errOut)
	}
	t.Setenv("JAILD_SESSION", "s1")
	if _, errOut, code := jaild(t, "remote", "--no-stdin", "--json", "--shell", "true"); code != 0 {
		t.Fatalf("remote with JAILD_SESSION: %d %q", code, errOut)
	}
	t.Setenv("JAILD_SESSION", "")
	if _, errOut, code := jaild(t, "remote", "--no-stdin", "--", "true"); code != 0 {
		t.Fatalf("remote: %d %q", code, errOut)
	}
	runs := srv.Runs()
	if len(runs) != 3 || runs[0].SessionID != "s1" || runs[1].SessionID != "s1" || runs[2].SessionID != "" {
		t.Errorf("requests: %+v", runs)
	}
}

func TestCp(t *testing.T) {
	srv := fakeDaemon(t)
	if _, _, code := jaild(t, "session", "new"); code != 0 {
		t.Fatal("session new failed")
	}
	local := t.TempDir()
	src := filepath.Join(local, "src")
	mustWrite(t, filepath.Join(src, "a.txt"), "alpha", 0o644)
	mustWrite(t, filepath.Join(src, "sub", "run.sh"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	work := srv.Dir("s1")

	if _, errOut, code := jaild(t, "cp", src, "s1:/work/proj"); code != 0 {
		t.Fatalf("cp dir up: %d %q", code, errOut)
	}
	checkTree(t, filepath.Join(work, "proj"))
	// A file into /work, into a directory there, and to a name.
	file := filepath.Join(src, "sub", "run.sh")
	for _, tt := range []struct{ dst, want string }{
		{"s1:/work/", "run.sh"},
		{"s1:", "run.sh"},
		{"s1:proj", "proj/run.sh"},
		{"s1:bin/go.sh", "bin/go.sh"},
	} {
		if _, errOut, code := jaild(t, "cp", file, tt.dst); code != 0 {
			t.Errorf("cp file %s: %d %q", tt.dst, code, errOut)
			continue
		}
		if st, err := os.Stat(filepath.Join(work, tt.want)); err != nil || st.Mode() != 0o755 {
			t.Errorf("cp file %s: %s: %v %v", tt.dst, tt.want, st, err)
		}
	}

	down := filepath.Join(local, "down")
	if _, errOut, code := jaild(t, "cp", "s1:/work/proj", down); code != 0 {
		t.Fatalf("cp dir down: %d %q", code, errOut)
	}
	checkTree(t, down)
	if out, errOut, code := jaild(t, "cp", "s1:proj/a.txt", "-"); code != 0 || out != "alpha" {
		t.Errorf("cp file to stdout: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := jaild(t, "cp", "s1:proj/a.txt", local); code != 0 {
		t.Errorf("cp file into a local dir: %d %q", code, errOut)
	} else if data, _ := os.ReadFile(filepath.Join(local, "a.txt")); string(data) != "alpha" {
		t.Errorf("a.txt: %q", data)
	}

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"cp", "s1:/work/missing", filepath.Join(local, "x")}, exitRefused},
		{[]string{"cp", "nope:/work/proj", filepath.Join(local, "x")}, exitRefused},
		{[]string{"cp", src, "s1:/etc"}, api.ExitUsage},
		{[]string{"cp", src, filepath.Join(local, "x")}, api.ExitUsage},
		{[]string{"cp", "s1:a", "s1:b"}, api.ExitUsage},
		{[]string{"cp", "s1:a"}, api.ExitUsage},
		{[]string{"cp", filepath.Join(local, "missing"), "s1:x"}, api.ExitInternal},
		{[]string{"cp", "s1:proj", "-"}, api.ExitInternal},
	} {
		if _, errOut, code := jaild(t, tt.args...); code != tt.code {
			t.Errorf("%q: %d %q, want %d", tt.args, code, errOut, tt.code)
		}
	}
}

func mustWrite(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// checkTree checks the copy of TestCp's src tree at dir.
func checkTree(t *testing.T, dir string) {
	t.Helper()
	if data, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(data) != "alpha" {
		t.Errorf("%s/a.txt: %q %v", dir, data, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "sub", "run.sh")); err != nil || st.Mode() != 0o755 {
		t.Errorf("%s/sub/run.sh: %v %v", dir, st, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "/etc/passwd" {
		t.Errorf("%s/link: %q %v", dir, target, err)
	}
}

// TestReadLocalTarHostile: an archive from a daemon (whose content a
// sandbox wrote) cannot lead the local unpacking out of its directory.
func TestReadLocalTarHostile(t *testing.T) {
	outside := t.TempDir()
	tests := []struct {
		name    string
		entries []*tar.Header
		ok      bool
	}{
		{"symlink out then through it", []*tar.Header{
			{Name: "x", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "x/f", Typeflag: tar.TypeReg, Mode: 0o644},
		}, false},
		{"relative symlink up then through it", []*tar.Header{
			{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../.." + outside},
			{Name: "x/f", Typeflag: tar.TypeReg, Mode: 0o644},
		}, false},
		{"dot dot is kept inside", []*tar.Header{{Name: "../../f", Typeflag: tar.TypeReg, Mode: 0o644}}, true},
		{"hard link out", []*tar.Header{{Name: "l", Typeflag: tar.TypeLink, Linkname: "../../../../etc/passwd"}}, false},
		{"device", []*tar.Header{{Name: "d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 5}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tt.entries {
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			dir := filepath.Join(t.TempDir(), "d")
			err := readLocalTar(&buf, dir)
			if (err == nil) != tt.ok {
				t.Errorf("readLocalTar: %v, want ok=%v", err, tt.ok)
			}
			if ents, _ := os.ReadDir(outside); len(ents) > 0 {
				t.Errorf("%d entries written outside", len(ents))
			}
		})
	}
}

// TestCpWorkDir: against a daemon whose sandboxes work in /workspace,
// S:/workspace/... is the workspace and S:/work/... a usage error that
// names /workspace.
func TestCpWorkDir(t *testing.T) {
	srv := fakeDaemon(t)
	srv.WorkDir = "/workspace"
	if _, _, code := jaild(t, "session", "new"); code != 0 {
		t.Fatal("session new failed")
	}
	local := t.TempDir()
	file := filepath.Join(local, "a.txt")
	mustWrite(t, file, "alpha", 0o644)
	work := srv.Dir("s1")
	for _, tt := range []struct{ dst, want string }{
		{"s1:/workspace/", "a.txt"},
		{"s1:/workspace", "a.txt"},
		{"s1:/workspace/sub/b.txt", "sub/b.txt"},
		{"s1:c.txt", "c.txt"},
	} {
		if _, errOut, code := jaild(t, "cp", file, tt.dst); code != 0 {
			t.Errorf("cp %s: %d %q", tt.dst, code, errOut)
		} else if data, err := os.ReadFile(filepath.Join(work, tt.want)); err != nil || string(data) != "alpha" {
			t.Errorf("cp %s: %s: %q %v", tt.dst, tt.want, data, err)
		}
	}
	if out, errOut, code := jaild(t, "cp", "s1:/workspace/sub/b.txt", "-"); code != 0 || out != "alpha" {
		t.Errorf("cp down: %d %q %q", code, out, errOut)
	}
	for _, arg := range []string{"s1:/work/a.txt", "s1:/work", "s1:/workspace/../etc/passwd"} {
		_, errOut, code := jaild(t, "cp", arg, filepath.Join(local, "x"))
		if code != api.ExitUsage || !strings.Contains(errOut, "under /workspace") {
			t.Errorf("cp %s: %d %q, want a usage error naming /workspace", arg, code, errOut)
		}
	}
	if _, errOut, code := jaild(t, "cp", "nope:/workspace/x", filepath.Join(local, "x")); code != exitRefused {
		t.Errorf("cp from a missing session: %d %q, want %d", code, errOut, exitRefused)
	}
}
