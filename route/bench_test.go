package route

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// BenchmarkHop: one session request served by the node the balancer chose
// (local) and by a peer, one hop away (forwarded), side by side. The
// backend answers at once, so the difference is the hop's own cost on
// loopback (a new connection is not part of it: the proxy keeps them).
func BenchmarkHop(b *testing.B) {
	body := `{"command":"true","session_id":"%s"}`
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"stdout":"","exit_code":0}`))
	})
	var urls []string
	var rts []*Router
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		rt, err := New(Config{Key: testKey, Advertise: netip.MustParseAddrPort(ln.Addr().String())})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(rt.Handler(backend, func(*http.Request) string { return "192.0.2.1" }))
		srv.Listener = ln
		srv.Start()
		b.Cleanup(srv.Close)
		urls, rts = append(urls, srv.URL), append(rts, rt)
	}
	id := rts[1].NewID()
	payload := strings.Replace(body, "%s", id, 1)
	for _, bc := range []struct{ name, url string }{{"local", urls[1]}, {"forwarded", urls[0]}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Post(bc.url+"/run", "application/json", strings.NewReader(payload))
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("%v %v", resp, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkParse: the route token check every request with a session id
// pays, with the id under the signing key and, in a rotation, under the
// last of the accepted keys (every key before it is tried first).
func BenchmarkParse(b *testing.B) {
	accept := [][]byte{[]byte("accepted key one, 32 bytes at least"), []byte("accepted key two, 32 bytes at least")}
	rt, err := New(Config{Key: testKey, AcceptKeys: accept, Advertise: netip.MustParseAddrPort("10.213.0.2:8080")})
	if err != nil {
		b.Fatal(err)
	}
	last, err := newKeyring(accept[1], nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, id string }{{"signing key", rt.NewID()}, {"third key", last.newID(rt.self)}} {
		b.Run(bc.name, func(b *testing.B) {
			keys := rt.keys.Load()
			for b.Loop() {
				if _, ok := keys.parse(bc.id); !ok {
					b.Fatal("parse failed")
				}
			}
		})
	}
}
