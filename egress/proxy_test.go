package egress_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
)

// recorder is a Resolver over a table that notes every name it is asked.
type recorder struct {
	mu    sync.Mutex
	asked []string
	hosts egress.Hosts
}

func (r *recorder) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.asked = append(r.asked, host)
	r.mu.Unlock()
	return r.hosts.LookupNetIP(ctx, network, host)
}

// served is a proxy serving one run on a loopback listener, standing in for
// the sandbox's.
type served struct {
	url   *url.URL
	stop  func() box.EgressUsage
	dec   chan egress.Decision
	names *recorder
}

func serve(t *testing.T, cfg egress.Config, g egress.Grant) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{dec: make(chan egress.Decision, 100)}
	if cfg.Resolver == nil {
		s.names = &recorder{hosts: egress.Hosts{Table: map[string][]netip.Addr{
			"up.test":      {netip.MustParseAddr("127.0.0.1")},
			"meta.test":    {netip.MustParseAddr("169.254.169.254")},
			"private.test": {netip.MustParseAddr("10.0.0.1")},
			"rebind.test":  {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")},
			"denied.test":  {netip.MustParseAddr("127.0.0.1")},
			"nowhere.test": {},
			"ipv6-lo.test": {netip.MustParseAddr("::1")},
		}}}
		cfg.Resolver = s.names
	}
	cfg.OnDecision = func(d egress.Decision) { s.dec <- d }
	p := egress.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan box.EgressUsage, 1)
	go func() { done <- p.Serve(ctx, ln, g) }()
	var once sync.Once
	var usage box.EgressUsage
	s.stop = func() box.EgressUsage {
		once.Do(func() { cancel(); usage = <-done })
		return usage
	}
	t.Cleanup(func() { s.stop() })
	s.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return s
}

func (s *served) client(tlsConfig *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(s.url), TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
}

func pats(t *testing.T, s ...string) []egress.Pattern {
	t.Helper()
	p, err := egress.ParsePatterns(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreams starts an HTTP and an HTTPS server on loopback; the HTTP one
// redirects /redirect to denied.test.
func upstreams(t *testing.T) (plain, secure *httptest.Server) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			_, port, _ := net.SplitHostPort(r.Host)
			http.Redirect(w, r, "http://denied.test:"+port+"/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "hello %s via=%q proxy-auth=%q", r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("Proxy-Authorization"))
	})
	plain, secure = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(plain.Close)
	t.Cleanup(secure.Close)
	return plain, secure
}

func port(t *testing.T, s *httptest.Server) string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyDecides drives the proxy over loopback (allowed only because
// the test names 127.0.0.1/32, as an operator may): by name, by pattern,
// after resolution, on redirects.
func TestProxyDecides(t *testing.T) {
	plain, secure := upstreams(t)
	pp, sp := port(t, plain), port(t, secure)
	cfg := egress.Config{
		Allow:     pats(t, "up.test:"+pp, "up.test:"+sp, "meta.test:*", "private.test:*", "rebind.test:*", "ipv6-lo.test:*", "nowhere.test:*"),
		AllowCIDR: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}
	s := serve(t, cfg, egress.Grant{Caller: "tester"})
	c := s.client(&tls.Config{RootCAs: secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "example.com"})

	tests := []struct {
		name     string
		url      string
		wantCode int
		wantBody string
	}{
		{"http by name", "http://up.test:" + pp + "/", 200, `hello up.test:` + pp + ` via="" proxy-auth=""`},
		{"https by name (CONNECT)", "https://up.test:" + sp + "/", 200, "hello up.test:" + sp},
		{"not allowed", "http://other.test:" + pp + "/", 403, "is not in the egress allowlist"},
		{"wrong port", "http://up.test:1/", 403, "is not in the egress allowlist"},
		{"https not allowed", "https://other.test:" + sp + "/", 0, "Forbidden"},
		{"metadata", "http://meta.test/latest/meta-data/", 403, "169.254.169.254 is link-local"},
		{"private", "http://private.test/", 403, "10.0.0.1 is private"},
		{"rebinding to private or loopback", "http://rebind.test:" + pp + "/", 200, "hello rebind.test"},
		{"ipv6 loopback", "http://ipv6-lo.test/", 403, "::1 is loopback"},
		{"by loopback IP, not named", "http://127.0.0.1:" + pp + "/", 403, "is not in the egress allowlist"},
		{"no address", "http://nowhere.test/", 403, "could not be resolved"},
		{"redirect to a denied host", "http://up.test:" + pp + "/redirect", 403, "denied.test:" + pp + " is not in the egress allowlist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, c, tt.url)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %q, want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	// The rebinding name resolved to 10.0.0.1 and 127.0.0.1: only the
	// address the operator named was dialed. Refused names were never
	// looked up.
	for _, n := range s.names.asked {
		if n == "other.test" || n == "denied.test" {
			t.Errorf("refused name %s was looked up", n)
		}
	}
	u := s.stop()
	if u.Connections != 4 || u.Denied != 9 || u.BytesIn == 0 || u.BytesOut == 0 {
		t.Errorf("usage %+v, want 4 connections, 9 denied, bytes both ways", u)
	}
}

// TestProxyNarrowAndCaps: a request's list narrows; the connection cap
// refuses the connection past it.
func TestProxyNarrowAndCaps(t *testing.T) {
	plain, _ := upstreams(t)
	pp := port(t, plain)
	cfg := egress.Config{
		Allow:     pats(t, "up.test:*", "rebind.test:*"),
		AllowCIDR: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		MaxConns:  2,
	}
	p := egress.New(cfg)
	if _, err := p.Narrow(nil, []string{"evil.test:443"}); err == nil {
		t.Error("a request pattern beyond the operator's list was accepted")
	}
	hosts, err := p.Narrow(nil, []string{"up.test:" + pp})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, cfg, egress.Grant{Hosts: hosts})
	c := s.client(nil)
	if code, body := get(t, c, "http://rebind.test:"+pp+"/"); code != 403 || !strings.Contains(body, "this request's egress list") {
		t.Errorf("narrowed out: %d %q", code, body)
	}
	for i, want := range []int{200, 200, 403} {
		if code, body := get(t, c, "http://up.test:"+pp+"/"); code != want {
			t.Errorf("connection %d: %d %q, want %d", i, code, body, want)
		}
	}
}

// TestProxyByteCap: a tunnel stops at the run's byte cap.
func TestProxyByteCap(t *testing.T) {
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1<<20))
	}))
	t.Cleanup(big.Close)
	cfg := egress.Config{Allow: pats(t, "up.test:*"), AllowCIDR: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, MaxBytes: 64 << 10}
	s := serve(t, cfg, egress.Grant{})
	resp, err := s.client(nil).Get("http://up.test:" + port(t, big) + "/")
	if err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n >= 1<<20 {
			t.Errorf("read %d bytes past a cap of 64 KiB", n)
		}
	}
	if u := s.stop(); u.BytesIn > 200<<10 {
		t.Errorf("usage %+v: far past the cap", u)
	}
}

// TestProxyNotAProxyRequest: an origin-form request is refused with 400.
func TestProxyNotAProxyRequest(t *testing.T) {
	s := serve(t, egress.Config{}, egress.Grant{})
	code, body := get(t, http.DefaultClient, s.url.String()+"/")
	if code != 400 || !strings.Contains(body, "not a proxy request") {
		t.Errorf("got %d %q", code, body)
	}
}

// TestProxyTunnelByteCap: a CONNECT tunnel is cut at the run's byte cap,
// both ways, even while the client keeps its side open.
func TestProxyTunnelByteCap(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = c.Write(make([]byte, 1<<20)); io.Copy(io.Discard, c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(up.Addr().String())
	cfg := egress.Config{Allow: pats(t, "up.test:*"), AllowCIDR: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, MaxBytes: 64 << 10}
	s := serve(t, cfg, egress.Grant{})
	c, err := net.Dial("tcp", s.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\nHost: up.test:%s\r\n\r\n", port, port)
	// The client never closes its side: only the cap ends the tunnel.
	n, _ := io.Copy(io.Discard, c)
	if n >= 1<<20 {
		t.Errorf("read %d bytes through a tunnel capped at 64 KiB", n)
	}
}

// TestProxyNamedIP: an address refused by default is dialed when the
// run's allowlist names it (the daemon's, or a token's), and only then.
func TestProxyNamedIP(t *testing.T) {
	plain, _ := upstreams(t)
	pp := port(t, plain)
	byIP, byName := "http://127.0.0.1:"+pp+"/", "http://up.test:"+pp+"/"
	for _, tt := range []struct {
		name   string
		cfg    egress.Config
		g      egress.Grant
		target string
		want   string
	}{
		{"named by the daemon", egress.Config{Allow: pats(t, "127.0.0.1:"+pp)}, egress.Grant{}, byIP, "hello"},
		{"named by the token", egress.Config{}, egress.Grant{Base: pats(t, "127.0.0.1:"+pp)}, byIP, "hello"},
		{"a name resolving to it", egress.Config{Allow: pats(t, "127.0.0.1:"+pp, "up.test:"+pp)}, egress.Grant{}, byName, "hello"},
		{"named on another port", egress.Config{Allow: pats(t, "127.0.0.1:1", "up.test:"+pp)}, egress.Grant{}, byName, "127.0.0.1 is loopback"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := serve(t, tt.cfg, tt.g)
			if _, body := get(t, s.client(nil), tt.target); !strings.Contains(body, tt.want) {
				t.Errorf("got %q, want %q", body, tt.want)
			}
		})
	}
}
