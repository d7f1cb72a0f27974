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

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/sessionfake"
)

func newFake(t *testing.T) (*sessionfake.Server, *client.Client) {
	t.Helper()
	srv := sessionfake.New(t)
	srv.Token = "secret"
	c, err := client.New(client.Options{Server: srv.URL, Token: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// TestSessions: create, list, get, patch and delete a session; a missing
// one is an *APIError with the daemon's status and code.
func TestSessions(t *testing.T) {
	srv, c := newFake(t)
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
	bad, _ := client.New(client.Options{Server: srv.URL})
	if _, err := bad.Sessions(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("without a token: %v", err)
	}
}

// TestJobs: a job's output is read from offsets until it has ended;
// KillJob answers the job.
func TestJobs(t *testing.T) {
	srv, c := newFake(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Start(ctx, &api.Request{Command: "sleep 1", SessionID: s.ID})
	if err != nil || a.JobID != "j1" || !srv.Runs()[0].RunInBackground {
		t.Fatalf("Start: %+v, %v", a, err)
	}
	srv.AddJob(s.ID, api.Job{JobID: "j2", Command: []string{"make"}, State: "running"}, "hello, world\n", "warning\n")
	if l, err := c.Jobs(ctx, s.ID); err != nil || len(l) != 1 || l[0].JobID != "j2" {
		t.Errorf("Jobs: %+v, %v", l, err)
	}
	var out, errOut strings.Builder
	q := client.JobQuery{}
	for i := 0; ; i++ {
		j, err := c.Job(ctx, s.ID, "j2", q)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(j.Stdout)
		errOut.WriteString(j.Stderr)
		q.StdoutOffset, q.StderrOffset = j.StdoutOffset, j.StderrOffset
		if j.State != "running" {
			if j.ExitCode == nil || *j.ExitCode != 3 {
				t.Errorf("ended job: %+v", j)
			}
			break
		}
		if i > 100 {
			t.Fatal("job never ended")
		}
	}
	if out.String() != "hello, world\n" || errOut.String() != "warning\n" {
		t.Errorf("output %q %q", out.String(), errOut.String())
	}
	if j, err := c.KillJob(ctx, s.ID, "j2"); err != nil || j.Verdict == nil || !j.Verdict.Canceled {
		t.Errorf("KillJob: %+v, %v", j, err)
	}
	var ae *client.APIError
	if _, err := c.Job(ctx, s.ID, "nope", client.JobQuery{}); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("Job of a missing job: %v", err)
	}
}

// TestFiles: PutFile (bytes with a mode, a tar), OpenFile/GetFile (a
// file, a directory's listing and its tar), DeleteFile, and the daemon's
// errors.
func TestFiles(t *testing.T) {
	srv, c := newFake(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutFile(ctx, s.ID, "/bin/run me.sh", strings.NewReader("#!/bin/sh\n"), &client.PutOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(srv.Dir(s.ID), "bin", "run me.sh"))
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
