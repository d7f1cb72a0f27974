package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
)

func TestForwardedFor(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tt := range []struct {
		name, peer string
		xff        []string
		want       string // "" means the connection's peer stands
	}{
		{"untrusted peer", "192.0.2.1:5000", []string{"198.51.100.7"}, ""},
		{"trusted, one hop", "10.1.1.1:5000", []string{"198.51.100.7"}, "198.51.100.7"},
		{"forged left part ignored", "10.1.1.1:5000", []string{"6.6.6.6, 198.51.100.7"}, "198.51.100.7"},
		{"chain of proxies", "10.1.1.1:5000", []string{"198.51.100.7, 10.2.2.2", "10.3.3.3"}, "198.51.100.7"},
		{"all trusted", "10.1.1.1:5000", []string{"10.2.2.2"}, ""},
		{"garbage", "10.1.1.1:5000", []string{"198.51.100.7, bogus"}, ""},
		{"no header", "10.1.1.1:5000", nil, ""},
		{"v6", "[fd00::1]:5000", []string{"2001:db8::7"}, "2001:db8::7"},
		{"unix peer", "uid:0", []string{"198.51.100.7"}, ""},
	} {
		got, ok := forwardedFor(tt.peer, tt.xff, trusted)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("%s: forwardedFor = %q %v, want %q", tt.name, got, ok, tt.want)
		}
	}
}

type callerRunner struct{ got chan string }

func (c callerRunner) Run(ctx context.Context, r run.Request) (*box.Result, error) {
	c.got <- r.Caller
	return &box.Result{}, nil
}

func (callerRunner) Start(context.Context, run.Request) (string, error) { return "", ErrNoSessions }

// TestTrustedProxyCaller: behind a trusted proxy the caller (here, without
// tokens: the owner of sessions and the key of quotas) is the address the
// proxy names, not the proxy's.
func TestTrustedProxyCaller(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		want    string
	}{
		{"trusted", []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, "198.51.100.7"},
		{"not trusted", nil, "192.0.2.1"},
	} {
		c := callerRunner{make(chan string, 1)}
		srv, err := New(Options{Runner: c, TrustedProxies: tt.trusted})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "/run", strings.NewReader(`{"command":"true"}`))
		req.RemoteAddr = "192.0.2.1:4000"
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.name, w.Code, w.Body)
		}
		if got := <-c.got; got != tt.want {
			t.Errorf("%s: caller %q, want %q", tt.name, got, tt.want)
		}
	}
}
