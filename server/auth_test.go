package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

func mustTokens(t *testing.T, lines ...string) *server.Tokens {
	t.Helper()
	tok, err := server.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		wantErr string
	}{
		{name: "ok", file: "# agents\n\nalice:0123456789abcdef\n  bob:ZmFrZS10b2tlbi1mb3ItYm9i==  \n"},
		{name: "empty", file: "# nothing\n\n", wantErr: "no tokens"},
		{name: "no colon", file: "0123456789abcdef\n", wantErr: "not NAME:TOKEN"},
		{name: "short token", file: "alice:short\n", wantErr: "at least 16"},
		{name: "token with a space", file: "alice:0123456789 abcdef\n", wantErr: "at least 16"},
		{name: "bad name", file: "al ice:0123456789abcdef\n", wantErr: "bad name"},
		{name: "duplicate name", file: "a:0123456789abcdef\na:0123456789abcdeg\n", wantErr: "duplicate name"},
		{name: "duplicate token", file: "a:0123456789abcdef\nb:0123456789abcdef\n", wantErr: "already used"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := server.ParseTokens(strings.NewReader(tt.file))
			if tt.wantErr == "" {
				if err != nil || server.TokenCount(tok) != 2 {
					t.Fatalf("ParseTokens: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "0123456789") {
				t.Errorf("error message leaks a token: %v", err)
			}
		})
	}
}

func TestTokensLookup(t *testing.T) {
	tok := mustTokens(t, "alice:0123456789abcdef", "bob:fedcba9876543210")
	for _, tt := range []struct {
		token, name string
		ok          bool
	}{
		{"0123456789abcdef", "alice", true},
		{"fedcba9876543210", "bob", true},
		{"0123456789abcde", "", false},
		{"0123456789abcdefX", "", false},
		{"", "", false},
	} {
		if name, ok := tok.Lookup(tt.token); name != tt.name || ok != tt.ok {
			t.Errorf("Lookup(%q) = %q, %v", tt.token, name, ok)
		}
	}
}

func TestLoadTokensRefusesOpenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("a:0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadTokens(path); err == nil || !strings.Contains(err.Error(), "other users") {
		t.Fatalf("world-readable token file: %v", err)
	}
	os.Chmod(path, 0o640)
	if tok, err := server.LoadTokens(path); err != nil || server.TokenCount(tok) != 1 {
		t.Fatalf("LoadTokens: %v", err)
	}
	if _, err := server.LoadTokens(path + ".missing"); err == nil {
		t.Fatal("missing token file accepted")
	}
}

// TestAuth: every endpoint but /healthz and /openapi.yaml needs a valid
// token; failures say nothing but 401; the caller's name reaches the audit
// log.
func TestAuth(t *testing.T) {
	var audit syncBuffer
	f := &fake{}
	m := run.NewMetrics()
	ts := start(t, server.Options{
		Runner:  chain(t, f, m, &audit, run.AdmitOptions{}),
		Metrics: m,
		Tokens:  mustTokens(t, "alice:0123456789abcdef"),
	})
	bad := []struct {
		name string
		hdr  string
	}{
		{"missing", ""},
		{"wrong token", "Bearer 0123456789abcdeX"},
		{"prefix of the token", "Bearer 0123456789"},
		{"wrong scheme", "Basic 0123456789abcdef"},
		{"no scheme", "0123456789abcdef"},
	}
	for _, path := range []string{"/run", "/raw"} {
		for _, tt := range bad {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				resp, body := post(t, ts.URL+path, `{"command":"id"}`, "Authorization", tt.hdr)
				if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if e := decodeError(t, body); e != (api.ErrorResponse{Error: "unauthorized", Code: api.CodeUnauthorized}) {
					t.Errorf("401 body says more than unauthorized: %+v", e)
				}
			})
		}
	}
	// Auth comes before anything else: a bad request without a token is
	// a 401, not a 400 that would tell an attacker about the API.
	if resp, _ := post(t, ts.URL+"/run", `{`, "Content-Type", "text/plain"); resp.StatusCode != 401 {
		t.Errorf("bad request without token: status %d", resp.StatusCode)
	}
	if resp, _ := get(t, ts.URL+"/metrics"); resp.StatusCode != 401 {
		t.Errorf("/metrics without token: status %d", resp.StatusCode)
	}
	if len(f.Calls()) != 0 {
		t.Fatal("an unauthenticated request reached the runner")
	}

	resp, body := post(t, ts.URL+"/run", `{"command":"id"}`, "Authorization", "bearer 0123456789abcdef")
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: status %d: %s", resp.StatusCode, body)
	}
	var rec api.AuditRecord
	if err := json.Unmarshal(audit.Bytes(), &rec); err != nil {
		t.Fatalf("audit %q: %v", audit.Bytes(), err)
	}
	if rec.Caller != "alice" || rec.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("audit record caller %q request %q", rec.Caller, rec.RequestID)
	}
	if v := metric(t, ts, `jaild_requests_rejected_total{reason="unauthorized"}`, "Authorization", "Bearer 0123456789abcdef"); v != 12 {
		t.Errorf("rejected unauthorized = %v, want 12", v)
	}
}

// TestUnixSocketPeer: without tokens, the caller is named after the peer;
// on a unix socket that is the uid the kernel reports.
func TestUnixSocketPeer(t *testing.T) {
	var audit syncBuffer
	srv, err := server.New(server.Options{Runner: chain(t, &fake{}, nil, &audit, run.AdmitOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "jaild.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); server.Recv(t, done, "Serve to return") }()

	c, err := client.New(client.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(context.Background(), &api.Request{Executable: "id"}); err != nil {
		t.Fatal(err)
	}
	var rec api.AuditRecord
	if err := json.Unmarshal(audit.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if want := "uid:" + strconv.Itoa(os.Getuid()); rec.Caller != want {
		t.Errorf("caller %q, want %q", rec.Caller, want)
	}
}

// TestTCPPeer: without tokens, a TCP caller is named after its address
// without the port, so that its next connection is the same caller (a
// session it made is its own there too).
func TestTCPPeer(t *testing.T) {
	var audit syncBuffer
	ts := start(t, server.Options{Runner: chain(t, &fake{}, nil, &audit, run.AdmitOptions{})})
	for i := 0; i < 2; i++ {
		// A new connection each time.
		if resp, body := post(t, ts.URL+"/run", `{"executable":"id"}`, "Connection", "close"); resp.StatusCode != 200 {
			t.Fatalf("run: status %d: %s", resp.StatusCode, body)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(audit.Bytes()))
	for n := 0; ; n++ {
		var rec api.AuditRecord
		if err := dec.Decode(&rec); err == io.EOF {
			if n != 2 {
				t.Fatalf("%d audit records, want 2", n)
			}
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if rec.Caller != "127.0.0.1" {
			t.Errorf("caller %q, want 127.0.0.1", rec.Caller)
		}
	}
}

// TestAudit checks one record per run, refused runs included, with the
// effective limits and the command's hash but never its output, stdin or
// env values, nor (by default) the command itself.
func TestAudit(t *testing.T) {
	var audit syncBuffer
	g := newGate()
	defer g.Open()
	var calls atomic.Int32
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		if calls.Add(1) == 1 {
			s.Stdout.Write([]byte("SECRET-OUTPUT"))
			return &box.Result{ID: "sb-9", ExitCode: 2, Stdout: "SECRET-OUTPUT", StdoutBytes: 13, Duration: 4 * time.Millisecond, CPUTime: 1 * time.Millisecond, MemoryPeak: 99,
				Limits: s.Limits}, nil
		}
		return g.Run(ctx, s)
	}}
	ts := start(t, server.Options{Runner: chain(t, f, nil, &audit, run.AdmitOptions{MaxConcurrent: 1, MaxQueue: 0})})
	resp, body := post(t, ts.URL+"/raw", `{"executable":"printenv","args":["SECRET-ARG"],"env":{"API_KEY":"SECRET-VALUE"},"stdin":"SECRET-STDIN","cwd":"/tmp","memory_bytes":67108864,"timeout_ms":2500}`)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"exit"`)) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	postAsync(t, ts.URL+"/run", `{"executable":"x"}`)
	server.Recv(t, g.Entered, "the blocking run")
	if resp, _ := post(t, ts.URL+"/run", `{"executable":"x"}`); resp.StatusCode != 429 {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	g.Open()
	eventually(t, "three audit records", func() bool { return bytes.Count(audit.Bytes(), []byte("\n")) == 3 })

	if bytes.Contains(audit.Bytes(), []byte("SECRET-")) {
		t.Errorf("audit log leaks output, stdin, env values or the command: %s", audit.Bytes())
	}
	lines := bytes.Split(bytes.TrimSpace(audit.Bytes()), []byte("\n"))
	var recs []api.AuditRecord
	for _, l := range lines {
		var rec api.AuditRecord
		dec := json.NewDecoder(bytes.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("audit line %s: %v", l, err)
		}
		recs = append(recs, rec)
	}
	first := recs[0]
	if first.Verdict != api.VerdictExitNonzero || first.ExitCode == nil || *first.ExitCode != 2 || first.SandboxID != "sb-9" ||
		first.CommandSHA256 != run.CommandHash([]string{"printenv", "SECRET-ARG"}) || len(first.Command) != 0 ||
		strings.Join(first.EnvKeys, ",") != "API_KEY" || first.Cwd != "/tmp" || first.StdinBytes != 12 ||
		first.StdoutBytes != 13 || first.MemoryPeakBytes != 99 || first.Caller == "" || first.Time.IsZero() {
		t.Errorf("first record %+v", first)
	}
	// Pids: the operator's maximum, below the default.
	wantLimits := api.AuditLimits{MemoryBytes: 64 << 20, Pids: 100, CPUs: 1, TmpfsSizeBytes: box.DefaultTmpfsSize,
		TimeoutMS: 2500, MaxOutputBytes: box.DefaultMaxOutput}
	if first.Limits != wantLimits {
		t.Errorf("limits %+v, want %+v", first.Limits, wantLimits)
	}
	// The refused run ends first, then the released one.
	if recs[1].Verdict != api.VerdictBusy || recs[1].ExitCode != nil || recs[1].SandboxID != "" {
		t.Errorf("refused run's record %+v", recs[1])
	}
	if recs[2].Verdict != api.VerdictOK {
		t.Errorf("third record %+v", recs[2])
	}

	t.Run("LogCommand", func(t *testing.T) {
		var buf bytes.Buffer
		r := run.Audit(server.Direct(&fake{}), run.NewAuditLog(&buf, run.AuditOptions{LogCommand: true, Now: func() time.Time { return time.Unix(1, 0) }}))
		r.Run(context.Background(), run.Request{Caller: "bob", Spec: &jail.Spec{Command: box.Command{Args: []string{"ls", "-l"}}}})
		var rec api.AuditRecord
		json.Unmarshal(buf.Bytes(), &rec)
		if strings.Join(rec.Command, " ") != "ls -l" || rec.Caller != "bob" || !rec.Time.Equal(time.Unix(1, 0)) {
			t.Errorf("record %+v", rec)
		}
	})
}

func TestCommandHash(t *testing.T) {
	// Argument boundaries matter: these must not collide.
	a := run.CommandHash([]string{"ab", "c"})
	b := run.CommandHash([]string{"a", "bc"})
	c := run.CommandHash([]string{"abc"})
	if a == b || b == c || a == c || len(a) != 64 {
		t.Errorf("hashes %s %s %s", a, b, c)
	}
}
