package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/testdaemon"

	// The test binary is re-executed as each sandbox's init, like jaild.
	_ "github.com/jaild/jaild/internal/inithook"
)

// newDaemon starts a real daemon (internal/testdaemon) and a client of it
// with its token.
func newDaemon(t *testing.T) (*testdaemon.Daemon, *client.Client) {
	t.Helper()
	d := testdaemon.Start(t, testdaemon.Options{})
	c, err := client.New(client.Options{Server: d.URL, Token: d.Token})
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

// TestSessions: create, list, get, patch and delete a session; a missing
// one is an *APIError with the daemon's status and code.
func TestSessions(t *testing.T) {
	d, c := newDaemon(t)
	ctx := context.Background()
	ttl := int64(60)
	s, err := c.CreateSession(ctx, &api.SessionRequest{TTLSeconds: &ttl, Env: map[string]string{"A": "1", "B": "2"}, Cwd: "/work/src"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || s.TTLSeconds != 60 || s.Cwd != "/work/src" || s.Env["A"] != "1" {
		t.Errorf("created %+v", s)
	}
	if l, err := c.Sessions(ctx); err != nil || len(l) != 1 || l[0].ID != s.ID {
		t.Errorf("Sessions: %+v, %v", l, err)
	}
	two := "22"
	p, err := c.PatchSession(ctx, s.ID, &api.SessionPatch{Env: map[string]*string{"A": nil, "B": &two}})
	if err != nil || len(p.Env) != 1 || p.Env["B"] != "22" {
		t.Errorf("PatchSession: %+v, %v", p, err)
	}
	if g, err := c.Session(ctx, s.ID); err != nil || g.Env["B"] != "22" {
		t.Errorf("Session: %+v, %v", g, err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if _, err := c.Session(ctx, s.ID); !errors.As(err, &ae) || ae.Status != 404 || ae.Code == "" {
		t.Errorf("Session after delete: %v", err)
	}
	if err := c.DeleteSession(ctx, "a/b?c"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("DeleteSession of an odd id: %v", err)
	}
	bad, _ := client.New(client.Options{Server: d.URL})
	if _, err := bad.Sessions(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("without a token: %v", err)
	}
}

// TestJobs: Start runs a job in the background; Job reads its output from
// the offsets of the previous answer, so that nothing comes twice, and
// waits for its end.
func TestJobs(t *testing.T) {
	_, c := newDaemon(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Start(ctx, &api.Request{Command: testdaemon.GatedJob, SessionID: s.ID})
	if err != nil || a.JobID == "" || a.SessionID != s.ID {
		t.Fatalf("Start: %+v, %v", a, err)
	}
	if l, err := c.Jobs(ctx, s.ID); err != nil || len(l) != 1 || l[0].JobID != a.JobID || l[0].State != "running" {
		t.Errorf("Jobs: %+v, %v", l, err)
	}
	var out, errOut strings.Builder
	q := client.JobQuery{}
	read := func() *api.Job {
		t.Helper()
		j, err := c.Job(ctx, s.ID, a.JobID, q)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(j.Stdout)
		errOut.WriteString(j.Stderr)
		q.StdoutOffset, q.StderrOffset = j.StdoutOffset, j.StderrOffset
		return j
	}
	// Its first lines, read while it waits for "go".
	for deadline := time.Now().Add(testdaemon.Patience); out.Len() < len("hello, world\n") || errOut.Len() < len("warning\n"); time.Sleep(10 * time.Millisecond) {
		if j := read(); j.State != "running" || time.Now().After(deadline) {
			t.Fatalf("job before its gate opened: %+v, output %q %q", j, out.String(), errOut.String())
		}
	}
	if j := read(); j.State != "running" || j.Stdout != "" || j.Stderr != "" {
		t.Errorf("job read again from its offsets: %+v", j)
	}
	if err := c.PutFile(ctx, s.ID, "go", strings.NewReader(""), nil); err != nil {
		t.Fatal(err)
	}
	q.Wait = testdaemon.Patience
	if j := read(); j.State != "exited" || j.ExitCode == nil || *j.ExitCode != 3 || j.Verdict == nil {
		t.Errorf("ended job: %+v", j)
	}
	if out.String() != "hello, world\ndone\n" || errOut.String() != "warning\n" {
		t.Errorf("output %q %q", out.String(), errOut.String())
	}
	var ae *client.APIError
	if _, err := c.Job(ctx, s.ID, "nope", client.JobQuery{}); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("Job of a missing job: %v", err)
	}
}

// TestJobUntilOutput: a wait with UntilOutput answers as soon as the job
// writes past the offsets, while the job still runs; one without it waits
// for the end (here, its whole budget, the job being gated).
func TestJobUntilOutput(t *testing.T) {
	_, c := newDaemon(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Start(ctx, &api.Request{Command: testdaemon.GatedJob, SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	// Its first line, with one wait: the job is running and gated, so only
	// its output can end the wait before Patience.
	t0 := time.Now()
	j, err := c.Job(ctx, s.ID, a.JobID, client.JobQuery{Wait: testdaemon.Patience, UntilOutput: true})
	if err != nil || j.State != "running" || j.Stdout+j.Stderr == "" {
		t.Fatalf("wait until output: %+v, %v", j, err)
	}
	if time.Since(t0) >= testdaemon.Patience {
		t.Fatalf("a wait until output answered only when its wait_ms ran out")
	}
	// Past all of its output so far, a short wait ends with nothing new.
	q := client.JobQuery{Wait: 300 * time.Millisecond, UntilOutput: true}
	for deadline := time.Now().Add(testdaemon.Patience); ; {
		j, err := c.Job(ctx, s.ID, a.JobID, q)
		if err != nil || j.State != "running" || time.Now().After(deadline) {
			t.Fatalf("job before its gate opened: %+v, %v", j, err)
		}
		if q.StdoutOffset == j.StdoutOffset && q.StderrOffset == j.StderrOffset {
			break // a wait that ended on its timeout, nothing new
		}
		q.StdoutOffset, q.StderrOffset = j.StdoutOffset, j.StderrOffset
	}
	// Without UntilOutput, a wait from offset 0 waits for the end, not
	// for the output already there.
	t0 = time.Now()
	if j, err := c.Job(ctx, s.ID, a.JobID, client.JobQuery{Wait: 300 * time.Millisecond}); err != nil || j.State != "running" || j.Stdout == "" {
		t.Fatalf("wait until the end: %+v, %v", j, err)
	}
	if time.Since(t0) < 300*time.Millisecond {
		t.Errorf("a wait for the end of a running job answered after %v, before its wait_ms", time.Since(t0))
	}
	// The gate opens: the wait from the last offsets ends with "done".
	if err := c.PutFile(ctx, s.ID, "go", strings.NewReader(""), nil); err != nil {
		t.Fatal(err)
	}
	q.Wait = testdaemon.Patience
	var out string
	for j := (*api.Job)(nil); j == nil || j.State == "running"; {
		if j, err = c.Job(ctx, s.ID, a.JobID, q); err != nil {
			t.Fatal(err)
		}
		out += j.Stdout
		q.StdoutOffset, q.StderrOffset = j.StdoutOffset, j.StderrOffset
	}
	if out != "done\n" {
		t.Errorf("output after the gate: %q", out)
	}
	var ae *client.APIError
	if _, err := c.Job(ctx, s.ID, a.JobID, client.JobQuery{Wait: time.Second, UntilOutput: true, StdoutOffset: 0}); err != nil {
		t.Errorf("until=output on an ended job: %v", err)
	}
	if _, err := c.Job(ctx, s.ID, "nope", client.JobQuery{Wait: time.Second, UntilOutput: true}); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("until=output on a missing job: %v", err)
	}
}

// TestKillJob: KillJob kills a running job and answers it ended, killed.
func TestKillJob(t *testing.T) {
	_, c := newDaemon(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Start(ctx, &api.Request{Command: "echo up; exec sleep 600", SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(testdaemon.Patience); ; time.Sleep(10 * time.Millisecond) {
		j, err := c.Job(ctx, s.ID, b.JobID, client.JobQuery{})
		if err != nil || j.State != "running" || time.Now().After(deadline) {
			t.Fatalf("job to kill: %+v, %v", j, err)
		}
		if j.Stdout == "up\n" {
			break
		}
	}
	if j, err := c.KillJob(ctx, s.ID, b.JobID); err != nil || j.State != "exited" || j.Verdict == nil || !j.Verdict.Canceled {
		t.Errorf("KillJob: %+v, %v", j, err)
	}
}

// TestFiles: PutFile (bytes with a mode, a tar), OpenFile/GetFile (a
// file, a directory's listing and its tar), DeleteFile, and the daemon's
// errors.
func TestFiles(t *testing.T) {
	d, c := newDaemon(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutFile(ctx, s.ID, "/bin/run me.sh", strings.NewReader("#!/bin/sh\n"), &client.PutOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(d.Dir(s.ID), "bin", "run me.sh"))
	if err != nil || st.Mode() != 0o755 {
		t.Errorf("file written: %v, %v", st, err)
	}
	var buf bytes.Buffer
	if kind, err := c.GetFile(ctx, s.ID, "bin/run me.sh", &buf, true); err != nil || kind != "file" || buf.String() != "#!/bin/sh\n" {
		t.Errorf("GetFile: %q %q %v", kind, buf.String(), err)
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "src/a.go", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("abc"))
	_ = tw.Close()
	if err := c.PutFile(ctx, s.ID, "proj", &archive, &client.PutOptions{Tar: true}); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListFiles(ctx, s.ID, "proj/src")
	if err != nil || l.Path != "/work/proj/src" || len(l.Entries) != 1 || l.Entries[0].Name != "a.go" || l.Entries[0].Size != 3 {
		t.Errorf("ListFiles: %+v, %v", l, err)
	}
	buf.Reset()
	if kind, err := c.GetFile(ctx, s.ID, "proj", &buf, true); err != nil || kind != "tar" {
		t.Fatalf("GetFile of a dir: %q %v", kind, err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "src/ src/a.go" {
		t.Errorf("tar of proj: %q", names)
	}
	if l, err := c.ListFiles(ctx, s.ID, ""); err != nil || l.Path != "/work" || len(l.Entries) != 2 {
		t.Errorf("ListFiles of /work: %+v, %v", l, err)
	}
	if _, err := c.ListFiles(ctx, s.ID, "bin/run me.sh"); err == nil {
		t.Error("ListFiles of a file succeeded")
	}
	if err := c.DeleteFile(ctx, s.ID, "proj"); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if _, err := c.OpenFile(ctx, s.ID, "proj", false); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != api.CodeFileNotFound {
		t.Errorf("OpenFile after DeleteFile: %v", err)
	}
	if err := c.PutFile(ctx, s.ID, "bin", strings.NewReader("x"), nil); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != api.CodeConflict {
		t.Errorf("PutFile over a directory: %v", err)
	}
	if err := c.PutFile(ctx, "nope", "f", strings.NewReader("x"), nil); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("PutFile in a missing session: %v", err)
	}
}
