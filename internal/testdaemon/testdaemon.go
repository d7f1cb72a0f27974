// Package testdaemon serves jaild's HTTP API to the tests of its front ends
// (package client, the jaild CLI): the real server, wired by server.Config
// as jaild serve wires it (run chain, sessions with their jobs, the files
// API, bearer tokens, an audit log), over a jail.Manager of the test's own
// on a private installation (internal/testenv). Unlike jaild serve it
// builds the sandboxes in the test process, not in a worker, and charges
// the files API's writes to that process.
//
// It needs root; the test binary must import internal/inithook, whose init
// the jail re-executes it as.
package testdaemon

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
	"github.com/jaild/jaild/session"
	"github.com/jaild/jaild/session/files"
)

// Options configure a Daemon.
type Options struct {
	// WorkDir is the sandboxes' working directory (jaild serve's
	// --sandbox-workdir); empty means /work.
	WorkDir string
}

// Daemon is a jaild serving HTTP on a loopback port until its test ends.
type Daemon struct {
	URL string // http://127.0.0.1:PORT
	// Token is the bearer token of the daemon's one caller, whose token
	// file TokenFile is (jaild serve --token-file).
	Token, TokenFile string

	sessions *session.Manager
	audit    lockedBuffer
}

// callerName names the token's holder.
const callerName = "tester"

// GatedJob is the script of a job that writes a line on each stream
// ("hello, world", "warning"), waits for the file "go" in its working
// directory, then writes "done" and exits 3: it runs until the test lets
// it end.
const GatedJob = "echo hello, world; echo warning >&2; until [ -e go ]; do sleep 0.05; done; echo done; exit 3"

// Patience bounds a test's waits for a job; it only fails a test that
// would otherwise hang, it never measures.
const Patience = 30 * time.Second

// Start starts a daemon with o; it is stopped, and the installation checked
// for leftovers, when t ends.
func Start(t testing.TB, o Options) *Daemon {
	t.Helper()
	testenv.NeedRoot(t, "the daemon's sandboxes need namespaces and cgroups")
	in := testenv.New(t, "jaild-testdaemon")
	jm, err := jail.New(jail.Config{StateDir: in.StateDir, CgroupParent: in.Parent, WorkDir: o.WorkDir})
	if err != nil {
		t.Fatalf("jail.New: %v", err)
	}
	t.Cleanup(func() {
		if err := jm.Close(); err != nil {
			t.Errorf("jail Close: %v", err)
		}
	})
	d := &Daemon{}
	d.sessions, err = session.New(session.Local(jm), session.Config{WorkDir: o.WorkDir})
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.sessions.Close(); err != nil {
			t.Errorf("sessions Close: %v", err)
		}
	})
	d.TokenFile, d.Token = testenv.TokenFile(t, callerName)
	tokens, err := server.LoadTokens(d.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	audit := run.NewAuditLog(&d.audit, run.AuditOptions{LogCommand: true})
	cfg := server.Config{
		Base:     jm,
		Sessions: d.sessions,
		Chain:    run.ChainOptions{Audit: audit, WorkDir: o.WorkDir},
		Server:   server.Options{Tokens: tokens, Files: server.NewFilesHandler(files.Options{})},
	}
	d.serve(t, cfg)
	return d
}

// serve runs cfg on a loopback port until t ends.
func (d *Daemon) serve(t testing.TB, cfg server.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.URL = "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cfg.Run(ctx, context.Background(), ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
}

// Dir is the host directory of session id's workspace; empty if the
// daemon's caller has no such session.
func (d *Daemon) Dir(id string) string {
	s, err := d.sessions.Get(caller.FromToken(callerName), id)
	if err != nil {
		return ""
	}
	return s.Dir()
}

// Audit returns the audit records of the runs so far (refused ones too),
// commands included, oldest first.
func (d *Daemon) Audit(t testing.TB) []api.AuditRecord {
	t.Helper()
	var recs []api.AuditRecord
	dec := json.NewDecoder(bytes.NewReader(d.audit.Bytes()))
	for dec.More() {
		var r api.AuditRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		recs = append(recs, r)
	}
	return recs
}

// lockedBuffer is the audit log's writer: the runs write it while a test
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
