package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(t.TempDir(), "ca.pem"), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	writePEM(t, ca.file, "CERTIFICATE", der, 0o644)
	return ca
}

func serial(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// issue writes a server certificate for 127.0.0.1, ::1 and localhost,
// signed by ca, to dir/NAME.crt and its key to dir/NAME.key with keyMode.
func (ca *testCA) issue(t *testing.T, dir, name string, keyMode os.FileMode) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "jaild test server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER, keyMode)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// serveLog collects a daemon's JSON log and reports the address of its
// "listening" line.
type serveLog struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	partial   []byte
	listening chan string
}

func (l *serveLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		var m struct{ Msg, Addr string }
		if json.Unmarshal(l.partial[:i], &m) == nil && m.Msg == "listening" {
			select {
			case l.listening <- m.Addr:
			default:
			}
		}
		l.partial = l.partial[i+1:]
	}
}

// waitFor waits until the log holds s: the daemon's stderr reaches the
// test through a pipe, after the event that wrote it.
func (l *serveLog) waitFor(t *testing.T, s string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(l.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the daemon's log lacks %q", s)
			return
		}
	}
}

func (l *serveLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startServe starts jaild serve ARGS on in (without a pool, so that it
// builds no sandbox before a request asks for one), waits until it
// listens, and returns the address and the log. newNet runs it in a network
// namespace of its own, where it can bind any address and reach nothing.
// The daemon is stopped with SIGTERM when the test ends.
func startServe(t *testing.T, in install, newNet bool, args ...string) (addr string, log *serveLog) {
	t.Helper()
	return startServeEnv(t, in, newNet, nil, args...)
}

// request sends method path to the daemon at base (a JSON body if body is
// not empty) and returns the status and the body of the answer.
func request(t *testing.T, base, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startServeEnv is startServe with env added to the daemon's environment.
func startServeEnv(t *testing.T, in install, newNet bool, env []string, args ...string) (addr string, log *serveLog) {
	t.Helper()
	base := []string{"serve", "--log-format", "json", "--pool", "0", "--audit-log", "off"}
	if !slices.Contains(args, "--listen") && !slices.Contains(args, "--socket") {
		// Not the default port: whatever else on the host holds it.
		base = append(base, "--listen", "127.0.0.1:0")
	}
	cmd := in.cmd(append(base, args...)...)
	cmd.Env = append(cmd.Env, env...)
	if newNet {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	log = &serveLog{listening: make(chan string, 1)}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("jaild serve exited with %v on SIGTERM", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("jaild serve did not stop on SIGTERM; killing it")
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jaild serve log:\n%s", log)
		}
	})
	select {
	case addr = <-log.listening:
		return addr, log
	case err := <-exited:
		exited <- err
		t.Fatalf("jaild serve exited before listening: %v\n%s", err, log)
	case <-time.After(time.Minute):
		t.Fatalf("jaild serve did not listen\n%s", log)
	}
	return "", nil
}

// remote runs jaild remote ARGS, without stdin; newNet as for startServe.
func remote(t *testing.T, newNet bool, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(jaildBin, append([]string{"remote", "--no-stdin"}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	if newNet {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code = exitCode(cmd.Run())
	if code < 0 {
		t.Fatalf("jaild remote did not run: %s", errb.String())
	}
	return code, out.String(), errb.String()
}

// bearer adds the token to every request of an http.Client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// httpsClient trusts only pool and, as Go's default, offers HTTP/2.
func httpsClient(t *testing.T, pool *x509.CertPool, token string) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: bearer{token, tr}, Timeout: 2 * time.Minute}
}

// TestServeTLS serves HTTPS with a certificate of a CA made here, named in
// the config file, and calls it with jaild remote, Go's HTTP client and the
// MCP SDK's client.
func TestServeTLS(t *testing.T) {
	in := newInstall(t)
	dir := t.TempDir()
	ca := newTestCA(t, "jaild test CA")
	certFile, keyFile := ca.issue(t, dir, "server", 0o600)
	tokens, token := testenv.TokenFile(t, "tls-test")
	cfg := filepath.Join(dir, "jaild.conf")
	if err := os.WriteFile(cfg, []byte("tls-cert = "+certFile+"\ntls-key = \""+keyFile+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, log := startServe(t, in, false, "--config", cfg, "--listen", "127.0.0.1:0", "--token-file", tokens)
	base := "https://" + addr

	t.Run("remote streams /raw", func(t *testing.T) {
		code, stdout, stderr := remote(t, false, nil, "--server", base, "--ca-file", ca.file, "--token-file", tokens,
			"--shell", "echo out; echo err >&2; exit 3")
		if code != 3 || stdout != "out\n" || stderr != "err\n" {
			t.Errorf("exit %d, stdout %q, stderr %q; want 3, out, err", code, stdout, stderr)
		}
	})
	t.Run("remote --json uses /run", func(t *testing.T) {
		code, stdout, stderr := remote(t, false, []string{"JAILD_SERVER=" + base, "JAILD_CA_FILE=" + ca.file, "JAILD_TOKEN_FILE=" + tokens},
			"--json", "--", "echo", "json")
		if code != 0 || !strings.Contains(stdout, `"stdout": "json\n"`) {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	for name, args := range map[string][]string{
		"remote without --ca-file": nil,
		"remote with another CA":   {"--ca-file", newTestCA(t, "other CA").file},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := remote(t, false, nil, append([]string{"--server", base, "--token-file", tokens, "--", "true"}, args...)...)
			if code != api.ExitInternal || !strings.Contains(stderr, "x509: certificate signed by unknown authority") || !strings.Contains(stderr, "--ca-file") {
				t.Errorf("exit %d, stderr %q; want %d and an x509 error naming --ca-file", code, stderr, api.ExitInternal)
			}
		})
	}
	t.Run("run with Go's client: TLS 1.3, HTTP/1.1", func(t *testing.T) {
		resp, err := httpsClient(t, ca.pool, token).Post(base+"/run", "application/json", strings.NewReader(`{"command":"echo over https"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out api.Response
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Stdout != "over https\n" {
			t.Errorf("status %d, %+v, %v", resp.StatusCode, out, err)
		}
		// The client offered h2; the daemon must not take it (see serverTLS).
		if resp.Proto != "HTTP/1.1" || resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 || resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Errorf("proto %s, TLS %+v; want HTTP/1.1 over TLS 1.3", resp.Proto, resp.TLS)
		}
	})
	t.Run("TLS 1.2 is refused", func(t *testing.T) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, MaxVersion: tls.VersionTLS12})
		if err == nil {
			c.Close()
			t.Fatal("TLS 1.2 handshake succeeded")
		}
		if !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("TLS 1.2 handshake: %v; want a protocol version alert", err)
		}
	})
	t.Run("plain HTTP to the TLS port", func(t *testing.T) {
		resp, err := http.Post("http://"+addr+"/run", "application/json", strings.NewReader(`{"command":"true"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
			t.Errorf("status %d, body %q", resp.StatusCode, body)
		}
	})
	t.Run("MCP over https", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tr := &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: httpsClient(t, ca.pool, token)}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "tls-test", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo over mcp"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Content) == 0 || res.IsError {
			t.Fatalf("result %+v", res)
		}
		if text, _ := res.Content[0].(*mcp.TextContent); text == nil || !strings.Contains(text.Text, "over mcp") {
			t.Errorf("tool result %+v lacks the output", res.Content[0])
		}
	})
	t.Run("certificate rotation without restart", func(t *testing.T) {
		handshake := func(pool *x509.CertPool) error {
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
			if err == nil {
				c.Close()
			}
			return err
		}
		rotate := func(cert, key string) {
			// Key first: between the renames a handshake would
			// find a mismatched pair, which keeps the old one.
			for _, mv := range [][2]string{{key, keyFile}, {cert, certFile}} {
				if err := os.Rename(mv[0], mv[1]); err != nil {
					t.Fatal(err)
				}
			}
		}
		ca2 := newTestCA(t, "next CA")
		rotate(ca2.issue(t, dir, "next", 0o600))
		if err := handshake(ca2.pool); err != nil {
			t.Fatalf("the rotated certificate is not served: %v", err)
		}
		if err := handshake(ca.pool); err == nil {
			t.Error("the old certificate is still served")
		}
		log.waitFor(t, "TLS certificate reloaded")
		// A rotated key open to others is refused; the last good pair
		// stays in service.
		careless := newTestCA(t, "careless CA")
		rotate(careless.issue(t, dir, "careless", 0o644))
		if err := handshake(ca2.pool); err != nil {
			t.Errorf("after a refused rotation: %v; want the previous certificate", err)
		}
		log.waitFor(t, "chmod go-rwx")
		// Doing what the log says is enough.
		if err := os.Chmod(keyFile, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := handshake(careless.pool); err != nil {
			t.Errorf("after chmod go-rwx of the key: %v; want the rotated certificate", err)
		}
	})
}

// TestServeTLSRefusals: bad TLS settings, and plain HTTP off loopback,
// are refused before the daemon binds (it runs in a network namespace of
// its own all the same, so that a daemon that does bind stays there).
func TestServeTLSRefusals(t *testing.T) {
	in := newInstall(t)
	dir := t.TempDir()
	ca := newTestCA(t, "jaild test CA")
	cert, key := ca.issue(t, dir, "server", 0o600)
	_, otherKey := ca.issue(t, dir, "other", 0o600)
	_, openKey := ca.issue(t, dir, "open", 0o644)
	_, groupKey := ca.issue(t, dir, "group", 0o640)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, _ := testenv.TokenFile(t, "tls-test")
	tlsArgs := []string{"--tls-cert", cert, "--tls-key", key}
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{name: "off loopback without TLS", args: []string{"--listen", "0.0.0.0:0", "--token-file", tokens},
			want: []string{"not a loopback address", "cleartext", "--tls-cert", "--insecure-plaintext"}},
		{name: "off loopback without TLS, from the environment", env: []string{"JAILD_LISTEN=[::]:0", "JAILD_TOKEN_FILE=" + tokens},
			want: []string{"cleartext", "--tls-cert"}},
		{name: "off loopback with TLS but without tokens", args: append([]string{"--listen", "0.0.0.0:0"}, tlsArgs...),
			want: []string{"without --token-file"}},
		{name: "key open to others", args: []string{"--tls-cert", cert, "--tls-key", openKey}, want: []string{openKey, "chmod go-rwx"}},
		{name: "key open to the group", env: []string{"JAILD_TLS_CERT=" + cert, "JAILD_TLS_KEY=" + groupKey}, want: []string{"chmod go-rwx"}},
		{name: "cert without key", args: []string{"--tls-cert", cert}, want: []string{"--tls-cert and --tls-key go together"}},
		{name: "key without cert", env: []string{"JAILD_TLS_KEY=" + key}, want: []string{"go together"}},
		{name: "key of another certificate", args: []string{"--tls-cert", cert, "--tls-key", otherKey}, want: []string{"private key does not match"}},
		{name: "not a certificate", args: []string{"--tls-cert", notPEM, "--tls-key", key}, want: []string{"--tls-cert", "PEM"}},
		{name: "missing key", args: []string{"--tls-cert", cert, "--tls-key", filepath.Join(dir, "nope")}, want: []string{"--tls-key", "no such file"}},
		{name: "TLS and insecure-plaintext", args: append([]string{"--insecure-plaintext"}, tlsArgs...), want: []string{"contradicts"}},
		{name: "TLS on a unix socket", args: append([]string{"--socket", filepath.Join(dir, "s.sock")}, tlsArgs...), want: []string{"unix socket needs no TLS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := in.cmd(append([]string{"serve", "--pool", "0", "--audit-log", "off"}, tt.args...)...)
			cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...) // a daemon that serves after all is stopped
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tt.env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			out, err := cmd.CombinedOutput()
			msg := strings.TrimSpace(string(out))
			if code := exitCode(err); code != api.ExitUsage || strings.Contains(msg, "\n") {
				t.Errorf("exit %d, output %q; want %d and one line", code, msg, api.ExitUsage)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("output %q lacks %q", msg, w)
				}
			}
		})
	}
}

// TestServeInsecurePlaintext: --insecure-plaintext (or its config file
// line) lets a daemon with tokens serve plain HTTP off loopback. The daemon
// binds all interfaces of a network namespace of its own.
func TestServeInsecurePlaintext(t *testing.T) {
	in := newInstall(t)
	tokens, _ := testenv.TokenFile(t, "tls-test")
	cfg := filepath.Join(t.TempDir(), "jaild.conf")
	if err := os.WriteFile(cfg, []byte("insecure-plaintext = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"flag":        {"--insecure-plaintext"},
		"config file": {"--config", cfg},
	} {
		t.Run(name, func(t *testing.T) {
			addr, _ := startServe(t, in, true, append([]string{"--listen", "0.0.0.0:0", "--token-file", tokens}, args...)...)
			host, _, _ := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
				t.Errorf("listening on %s, want all interfaces", addr)
			}
		})
	}
}

// TestRemoteCleartextToken: jaild remote keeps its token off plain HTTP to
// hosts that are not loopback. It runs in a network namespace of its own,
// where 192.0.2.1 (TEST-NET-1) is unreachable: nothing leaves the host
// whatever it does.
func TestRemoteCleartextToken(t *testing.T) {
	tokens, _ := testenv.TokenFile(t, "tls-test")
	ca := newTestCA(t, "jaild test CA")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{name: "token over http off loopback", args: []string{"--server", "http://192.0.2.1:8080", "--token-file", tokens},
			wantCode: api.ExitUsage, want: "refusing to send the token in cleartext to a host that is not loopback; use https:// (with --ca-file for a private CA) or --insecure-plaintext"},
		{name: "allowed with --insecure-plaintext", args: []string{"--server", "http://192.0.2.1:8080", "--token-file", tokens, "--insecure-plaintext"},
			wantCode: api.ExitInternal, want: "unreachable"},
		{name: "allowed over https", args: []string{"--server", "https://192.0.2.1:8443", "--token-file", tokens},
			wantCode: api.ExitInternal, want: "unreachable"},
		{name: "allowed without a token", args: []string{"--server", "http://192.0.2.1:8080"},
			wantCode: api.ExitInternal, want: "unreachable"},
		{name: "allowed to loopback", args: []string{"--server", "http://localhost:1", "--token-file", tokens},
			wantCode: api.ExitInternal, want: "POST /raw"},
		{name: "--ca-file with http", args: []string{"--server", "http://127.0.0.1:1", "--ca-file", ca.file},
			wantCode: api.ExitUsage, want: "--ca-file is for an https:// --server"},
		{name: "--ca-file without a certificate", args: []string{"--server", "https://127.0.0.1:1", "--ca-file", tokens},
			wantCode: api.ExitUsage, want: "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := remote(t, true, nil, append(tt.args, "--", "true")...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.wantCode, tt.want)
			}
			if tt.wantCode != api.ExitUsage && strings.Contains(stderr, "cleartext") {
				t.Errorf("refused: %q", stderr)
			}
		})
	}
}
