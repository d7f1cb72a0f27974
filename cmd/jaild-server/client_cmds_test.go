package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testdaemon"
)

// startDaemon starts a real daemon (internal/testdaemon) with o, and
// points the client commands at it through their environment variables.
func startDaemon(t *testing.T, o testdaemon.Options) *testdaemon.Daemon {
	t.Helper()
	d := testdaemon.Start(t, o)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("# mine\nme:"+d.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAILD_SERVER", d.URL)
	t.Setenv("JAILD_TOKEN_FILE", file)
	t.Setenv("JAILD_SESSION", "")
	return d
}

// jaild runs the command line args in-process and returns its stdout,
// stderr and exit status, as command.Main would exit.
func jaild(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := jaildTo(&out, &errOut, args...)
	return out.String(), errOut.String(), code
}

// jaildTo runs the command line args in-process with stdout and stderr,
// and returns its exit status.
func jaildTo(stdout, stderr io.Writer, args ...string) int {
	app := &cli.App{
		Name:           "jaild",
		Commands:       []*cli.Command{sessionCommand, jobsCommand, cpCommand, remoteCommand},
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"jaild"}, args...))
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &ec):
		fmt.Fprint(stderr, ec.Error())
		return ec.ExitCode()
	case err != nil:
		fmt.Fprint(stderr, err.Error())
		return api.ExitUsage
	}
	return 0
}

// newSession runs jaild session new and returns the session's id.
func newSession(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := jaild(t, append([]string{"session", "new"}, args...)...)
	id := strings.TrimSuffix(out, "\n")
	if code != 0 || id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("session new: %d %q %q", code, out, errOut)
	}
	return id
}

func TestSessionCommands(t *testing.T) {
	d := startDaemon(t, testdaemon.Options{})
	id1 := newSession(t, "--ttl", "90s", "--env", "A=1", "--env", "B=x=y", "--cwd", "/work/src")
	id2 := newSession(t)
	if d.Dir(id1) == "" || d.Dir(id2) == "" {
		t.Fatalf("the daemon has no sessions %s and %s", id1, id2)
	}
	out, _, code := jaild(t, "session", "ls")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, id1+" ") || !strings.Contains(out, "/work/src") || !strings.Contains(out, id2+" ") {
		t.Errorf("session ls: %d %q", code, out)
	}
	if _, errOut, code := jaild(t, "session", "rm", id1); code != 0 || d.Dir(id1) != "" {
		t.Errorf("session rm: %d %q", code, errOut)
	}
	if _, errOut, code := jaild(t, "session", "rm", id1, id2); code != exitRefused || !strings.Contains(errOut, id1) || d.Dir(id2) != "" {
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
	d := startDaemon(t, testdaemon.Options{})
	id := newSession(t)
	out, errOut, code := jaild(t, "remote", "--no-stdin", "--session", id, "--background", "--shell", testdaemon.GatedJob)
	job := strings.TrimSuffix(out, "\n")
	if code != 0 || job == "" {
		t.Fatalf("remote --background: %d %q %q", code, out, errOut)
	}
	out, _, code = jaild(t, "jobs", id)
	if code != 0 || !strings.Contains(out, job) || !strings.Contains(out, "echo hello, world;") || !strings.Contains(out, "running") {
		t.Errorf("jobs %s: %d %q", id, code, out)
	}
	// Without --follow: what there is now, which comes to the first lines
	// (the job then waits for "go").
	for deadline := time.Now().Add(testdaemon.Patience); ; time.Sleep(10 * time.Millisecond) {
		out, errOut, code := jaild(t, "jobs", id, job)
		if code != 0 || time.Now().After(deadline) {
			t.Fatalf("jobs %s %s: %d %q %q", id, job, code, out, errOut)
		}
		if out == "hello, world\n" && errOut == "warning\n" {
			break
		}
	}
	// --follow prints the first lines, then, once "go" is there, the rest,
	// and exits with the job's status.
	defer func(w time.Duration) { followWait = w }(followWait)
	followWait = time.Millisecond
	stdout := &watchWriter{want: "hello, world\n", seen: make(chan struct{})}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- jaildTo(stdout, &stderr, "jobs", id, job, "--follow") }()
	select {
	case <-stdout.seen:
	case code := <-done:
		t.Fatalf("jobs --follow ended before the job: %d %q %q", code, stdout.String(), stderr.String())
	case <-time.After(testdaemon.Patience):
		t.Fatalf("jobs --follow printed %q", stdout.String())
	}
	if err := os.WriteFile(filepath.Join(d.Dir(id), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 3 || stdout.String() != "hello, world\ndone\n" || stderr.String() != "warning\n" {
			t.Errorf("jobs --follow: %d %q %q", code, stdout.String(), stderr.String())
		}
	case <-time.After(testdaemon.Patience):
		t.Fatalf("jobs --follow did not end: %q", stdout.String())
	}
	if _, _, code := jaild(t, "jobs", id, "nope"); code != exitRefused {
		t.Errorf("a missing job: %d", code)
	}
	if _, _, code := jaild(t, "jobs", "--follow", id); code != api.ExitUsage {
		t.Errorf("--follow without a job: %d", code)
	}
	if _, _, code := jaild(t, "jobs"); code != api.ExitUsage {
		t.Errorf("jobs without a session: %d", code)
	}
}

// syncBuffer is a bytes.Buffer that a command writes while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// watchWriter is a syncBuffer that closes seen once it holds want.
type watchWriter struct {
	syncBuffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if w.String() == w.want {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

// TestRemoteSession: jaild remote runs in the session --session or
// JAILD_SESSION names, and without one outside any session.
func TestRemoteSession(t *testing.T) {
	d := startDaemon(t, testdaemon.Options{})
	id := newSession(t)
	if _, errOut, code := jaild(t, "remote", "--no-stdin", "--session", id, "--", "touch", "mark"); code != 0 {
		t.Fatalf("remote --session: %d %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(d.Dir(id), "mark")); err != nil {
		t.Errorf("the run in the session left no file in its workspace: %v", err)
	}
	t.Setenv("JAILD_SESSION", id)
	out, errOut, code := jaild(t, "remote", "--no-stdin", "--json", "--shell", "test -e mark && echo there")
	var resp api.Response
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || resp.Stdout != "there\n" || resp.ExitCode != 0 {
		t.Fatalf("remote --json with JAILD_SESSION: %d %q %q, want 0 and the response (mark there)", code, out, errOut)
	}
	if out, _, code := jaild(t, "remote", "--no-stdin", "--", "echo", "streamed"); code != 0 || out != "streamed\n" {
		t.Errorf("remote's output goes to the command's writer: %d %q", code, out)
	}
	t.Setenv("JAILD_SESSION", "")
	if _, errOut, code := jaild(t, "remote", "--no-stdin", "--", "test", "-e", "mark"); code != 1 {
		t.Fatalf("remote outside the session: %d %q, want 1 (no mark)", code, errOut)
	}
	var sessions []string
	for _, r := range d.Audit(t) {
		sessions = append(sessions, r.SessionID)
	}
	if want := []string{id, id, id, ""}; !slices.Equal(sessions, want) {
		t.Errorf("the audit log's sessions: %q, want %q", sessions, want)
	}
}

func TestCp(t *testing.T) {
	d := startDaemon(t, testdaemon.Options{})
	id := newSession(t)
	local := t.TempDir()
	src := filepath.Join(local, "src")
	mustWrite(t, filepath.Join(src, "a.txt"), "alpha", 0o644)
	mustWrite(t, filepath.Join(src, "sub", "run.sh"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	work := d.Dir(id)

	if _, errOut, code := jaild(t, "cp", src, id+":/work/proj"); code != 0 {
		t.Fatalf("cp dir up: %d %q", code, errOut)
	}
	checkTree(t, filepath.Join(work, "proj"))
	// A file into /work, into a directory there, and to a name.
	file := filepath.Join(src, "sub", "run.sh")
	for _, tt := range []struct{ dst, want string }{
		{id + ":/work/", "run.sh"},
		{id + ":", "run.sh"},
		{id + ":proj", "proj/run.sh"},
		{id + ":bin/go.sh", "bin/go.sh"},
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
	if _, errOut, code := jaild(t, "cp", id+":/work/proj", down); code != 0 {
		t.Fatalf("cp dir down: %d %q", code, errOut)
	}
	checkTree(t, down)
	if out, errOut, code := jaild(t, "cp", id+":proj/a.txt", "-"); code != 0 || out != "alpha" {
		t.Errorf("cp file to stdout: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := jaild(t, "cp", id+":proj/a.txt", local); code != 0 {
		t.Errorf("cp file into a local dir: %d %q", code, errOut)
	} else if data, _ := os.ReadFile(filepath.Join(local, "a.txt")); string(data) != "alpha" {
		t.Errorf("a.txt: %q", data)
	}

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"cp", id + ":/work/missing", filepath.Join(local, "x")}, exitRefused},
		{[]string{"cp", "nope:/work/proj", filepath.Join(local, "x")}, exitRefused},
		{[]string{"cp", src, id + ":/etc"}, api.ExitUsage},
		{[]string{"cp", src, filepath.Join(local, "x")}, api.ExitUsage},
		{[]string{"cp", id + ":a", id + ":b"}, api.ExitUsage},
		{[]string{"cp", id + ":a"}, api.ExitUsage},
		{[]string{"cp", filepath.Join(local, "missing"), id + ":x"}, api.ExitInternal},
		{[]string{"cp", id + ":proj", "-"}, api.ExitInternal},
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
	d := startDaemon(t, testdaemon.Options{WorkDir: "/workspace"})
	id := newSession(t)
	local := t.TempDir()
	file := filepath.Join(local, "a.txt")
	mustWrite(t, file, "alpha", 0o644)
	work := d.Dir(id)
	for _, tt := range []struct{ dst, want string }{
		{id + ":/workspace/", "a.txt"},
		{id + ":/workspace", "a.txt"},
		{id + ":/workspace/sub/b.txt", "sub/b.txt"},
		{id + ":c.txt", "c.txt"},
	} {
		if _, errOut, code := jaild(t, "cp", file, tt.dst); code != 0 {
			t.Errorf("cp %s: %d %q", tt.dst, code, errOut)
		} else if data, err := os.ReadFile(filepath.Join(work, tt.want)); err != nil || string(data) != "alpha" {
			t.Errorf("cp %s: %s: %q %v", tt.dst, tt.want, data, err)
		}
	}
	if out, errOut, code := jaild(t, "cp", id+":/workspace/sub/b.txt", "-"); code != 0 || out != "alpha" {
		t.Errorf("cp down: %d %q %q", code, out, errOut)
	}
	for _, arg := range []string{id + ":/work/a.txt", id + ":/work", id + ":/workspace/../etc/passwd"} {
		_, errOut, code := jaild(t, "cp", arg, filepath.Join(local, "x"))
		if code != api.ExitUsage || !strings.Contains(errOut, "under /workspace") {
			t.Errorf("cp %s: %d %q, want a usage error naming /workspace", arg, code, errOut)
		}
	}
	if _, errOut, code := jaild(t, "cp", "nope:/workspace/x", filepath.Join(local, "x")); code != exitRefused {
		t.Errorf("cp from a missing session: %d %q, want %d", code, errOut, exitRefused)
	}
}
