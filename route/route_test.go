package route

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func newTestRouter(t *testing.T, addr string, key []byte) *Router {
	t.Helper()
	rt, err := New(Config{Key: key, Advertise: netip.MustParseAddrPort(addr)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestIDs(t *testing.T) {
	for _, addr := range []string{"10.213.0.2:8080", "[fd00::1234:5678]:65535", "[::ffff:10.0.0.1]:1"} {
		rt := newTestRouter(t, addr, testKey)
		id := rt.NewID()
		if len(id) > 128 || url.PathEscape(id) != id || strings.Contains(id, "/") {
			t.Errorf("%s: id %q: longer than 128 or not path safe", addr, id)
		}
		tok, ok := rt.keys.Load().parse(id)
		if !ok || tok != rt.self {
			t.Errorf("%s: Parse(%q) = %v %v, want %v", addr, id, tok, ok, rt.self)
		}
		if want := netip.MustParseAddrPort(addr); tok.Addr.Addr() != want.Addr().Unmap() || tok.Addr.Port() != want.Port() {
			t.Errorf("%s: token names %v", addr, tok.Addr)
		}
	}
	rt := newTestRouter(t, "10.213.0.2:8080", testKey)
	other := newTestRouter(t, "10.213.0.2:8080", []byte("another fleet's key, 32 bytes long"))
	id := rt.NewID()
	tok, _, _ := strings.Cut(id, Sep)
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for _, tt := range []struct{ name, id string }{
		{"plain uuid", "0b9c1f9e-7d1c-4f57-9a3e-2f0c4b1d6e77"},
		{"empty", ""},
		{"another key", other.NewID()},
		{"address changed", flip(tok, 3) + id[len(tok):]},
		{"MAC changed", flip(tok, len(tok)-2) + id[len(tok):]},
		{"truncated", tok[:len(tok)-1] + id[len(tok):]},
		{"padded", tok + "=" + id[len(tok):]},
		{"no separator", tok},
	} {
		if got, ok := rt.keys.Load().parse(tt.id); ok {
			t.Errorf("%s: Parse(%q) = %v, want no token", tt.name, tt.id, got)
		}
	}
}

// fleet is n routers, each in front of a backend that records what it
// served, on loopback listeners.
type fleet struct {
	rts  []*Router
	srvs []*httptest.Server
	got  []chan *http.Request
}

func newFleet(t *testing.T, n int, cfg func(*Config)) *fleet {
	t.Helper()
	return newFleetServing(t, n, cfg, nil)
}

// newFleetServing is newFleet whose nodes serve TLS with cert, if not nil.
func newFleetServing(t *testing.T, n int, cfg func(*Config), cert *tls.Certificate) *fleet {
	t.Helper()
	f := &fleet{}
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c := Config{Key: testKey, Advertise: netip.MustParseAddrPort(ln.Addr().String()), DialTimeout: time.Second}
		if cfg != nil {
			cfg(&c)
		}
		rt, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *http.Request, 16)
		backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			got <- r
			w.Write(body)
		})
		srv := httptest.NewUnstartedServer(rt.Handler(backend, func(r *http.Request) string { return "203.0.113.9" }))
		srv.Listener = ln
		if cert != nil {
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		f.rts, f.srvs, f.got = append(f.rts, rt), append(f.srvs, srv), append(f.got, got)
	}
	return f
}

func do(t *testing.T, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// served returns the request backend i served, or nil if it served none.
func (f *fleet) served(i int) *http.Request {
	select {
	case r := <-f.got[i]:
		return r
	default:
		return nil
	}
}

func TestForward(t *testing.T) {
	f := newFleet(t, 2, nil)
	a, b := f.srvs[0].URL, f.rts[1]
	id := b.NewID()
	for _, tt := range []struct {
		name, method, path, body string
		hdr                      []string
	}{
		{"path", "GET", "/sessions/" + id + "/files/x", "", nil},
		{"session run path", "POST", "/sessions/" + id + "/run", `{"command":"true"}`, nil},
		{"run body", "POST", "/run", `{"command":"true","session_id":"` + id + `"}`, nil},
		{"raw body", "POST", "/raw", `{"session_id":"` + id + `","command":"true"}`, nil},
		{"mcp header", "POST", "/mcp", `{"jsonrpc":"2.0"}`, []string{"Mcp-Session-Id", id}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, a+tt.path, tt.body, tt.hdr...)
			if resp.StatusCode != 200 || body != tt.body {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
			if f.served(0) != nil {
				t.Errorf("served by the node the balancer chose, not the session's")
			}
			r := f.served(1)
			if r == nil {
				t.Fatal("the session's node served nothing")
			}
			if resp.Header.Get(NodeHeader) != b.Instance() {
				t.Errorf("%s %q, want the session's node %q", NodeHeader, resp.Header.Get(NodeHeader), b.Instance())
			}
			if peer, ok := b.ForwardedPeer(r); !ok || peer != "203.0.113.9" {
				t.Errorf("ForwardedPeer = %q %v, want the caller's address", peer, ok)
			}
		})
	}
	t.Run("local", func(t *testing.T) {
		for _, id := range []string{f.rts[0].NewID(), "plain-uuid", ""} {
			resp, _ := do(t, "POST", a+"/run", `{"session_id":"`+id+`"}`)
			if resp.StatusCode != 200 || f.served(0) == nil || f.served(1) != nil {
				t.Errorf("id %q: %d, not served locally", id, resp.StatusCode)
			}
		}
		// Too large to look into: served locally, which refuses it.
		big := `{"session_id":"` + id + `","stdin":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
		resp, body := do(t, "POST", a+"/run", big)
		if resp.StatusCode != 200 || body != big || f.served(0) == nil {
			t.Errorf("big body: %d, %d bytes, not served locally whole", resp.StatusCode, len(body))
		}
	})
	t.Run("forged header is ignored", func(t *testing.T) {
		resp, _ := do(t, "GET", a+"/sessions/"+id, "", ForwardedHeader, "10.0.0.1;"+
			strconv.FormatInt(time.Now().Unix(), 10)+";AAAAAAAAAAAAAAAA")
		if resp.StatusCode != 200 || f.served(1) == nil {
			t.Errorf("%d: a forged %s kept the request from its node", resp.StatusCode, ForwardedHeader)
		}
	})
}

func TestLost(t *testing.T) {
	f := newFleet(t, 2, nil)
	a := f.srvs[0].URL
	// A daemon that ran at node 1's address before it: same address,
	// another instance.
	before := newTestRouter(t, f.rts[1].self.Addr.String(), testKey)
	// A daemon that ran at node 0's own address.
	mine := newTestRouter(t, f.rts[0].self.Addr.String(), testKey)
	// A daemon whose address nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := newTestRouter(t, ln.Addr().String(), testKey)
	ln.Close()
	for _, tt := range []struct{ name, id string }{
		{"restarted peer", before.NewID()},
		{"restarted self", mine.NewID()},
		{"unreachable", gone.NewID()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, "GET", a+"/sessions/"+tt.id+"/jobs", "")
			var e api.ErrorResponse
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != http.StatusGone || e.Code != api.CodeSessionLost || !strings.Contains(e.Error, "create a new session") {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
			if f.served(0) != nil || f.served(1) != nil {
				t.Errorf("a stranger served a lost session")
			}
		})
	}
}

func TestPeerCIDRs(t *testing.T) {
	f := newFleet(t, 2, func(c *Config) { c.PeerCIDRs = []netip.Prefix{netip.MustParsePrefix("10.213.0.0/24")} })
	resp, _ := do(t, "GET", f.srvs[0].URL+"/sessions/"+f.rts[1].NewID(), "")
	if resp.StatusCode != 200 || f.served(0) == nil || f.served(1) != nil {
		t.Errorf("%d: forwarded to an address outside --peer-cidr", resp.StatusCode)
	}
}

// TestStream: a forwarded stream reaches the caller as it is written, not
// when it ends.
func TestStream(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	b := newTestRouter(t, ln.Addr().String(), testKey)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(b.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte("second\n"))
	}), func(*http.Request) string { return "" }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	defer close(release)
	f := newFleet(t, 1, nil)
	resp, err := http.Get(f.srvs[0].URL + "/sessions/" + b.NewID() + "/jobs/j")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make([]byte, 6)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, line); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(line) != "first\n" {
			t.Errorf("read %q: %v", line, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first line of a forwarded stream did not arrive before the stream's end")
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode uint32) string {
		p := dir + "/" + name
		if err := writeFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if k, err := LoadKey(write("ok", string(testKey)+"\n", 0o600)); err != nil || !bytes.Equal(k, testKey) {
		t.Errorf("LoadKey: %q %v", k, err)
	}
	for _, p := range []string{write("open", string(testKey), 0o604), write("short", "0123456789", 0o600)} {
		if _, err := LoadKey(p); err == nil {
			t.Errorf("LoadKey(%s) accepted it", p)
		}
	}
}

func writeFile(p, data string, mode uint32) error {
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Chmod(p, os.FileMode(mode))
}
