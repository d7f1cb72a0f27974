package route

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// lbNode is a daemon of a balancing fleet: a router in front of a backend
// that records what it served, beside a /readyz with a settable load.
type lbNode struct {
	rt    *Router
	srv   *httptest.Server
	got   chan *http.Request
	load  atomic.Int64
	ready atomic.Bool
}

// newLBFleet starts n nodes that list each other, and extra, as peers.
func newLBFleet(t *testing.T, n int, extra ...string) []*lbNode {
	t.Helper()
	var lns []net.Listener
	peers := append([]string(nil), extra...)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers = append(peers, ln.Addr().String())
	}
	var nodes []*lbNode
	for _, ln := range lns {
		nd := &lbNode{got: make(chan *http.Request, 16)}
		nd.ready.Store(true)
		rt, err := New(Config{Key: testKey, Advertise: netip.MustParseAddrPort(ln.Addr().String()), DialTimeout: time.Second, Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		nd.rt = rt
		backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			nd.got <- r
			w.Write(body)
		})
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			if !nd.ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "ok", "load": nd.load.Load()})
		})
		mux.Handle("/", rt.Handler(backend, func(r *http.Request) string { return "203.0.113.9" }))
		nd.srv = httptest.NewUnstartedServer(mux)
		nd.srv.Listener = ln
		nd.srv.Start()
		t.Cleanup(nd.srv.Close)
		nodes = append(nodes, nd)
	}
	return nodes
}

func pollAll(nodes []*lbNode) {
	for _, nd := range nodes {
		nd.rt.pollOnce(context.Background())
	}
}

// servedBy is the index of the node whose backend served the last
// request, or -1; it fails if more than one did.
func servedBy(t *testing.T, nodes []*lbNode) int {
	t.Helper()
	who := -1
	for i, nd := range nodes {
		select {
		case <-nd.got:
			if who >= 0 {
				t.Fatalf("served by nodes %d and %d", who, i)
			}
			who = i
		default:
		}
	}
	return who
}

// deadAddr is a loopback address nothing listens at.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func TestBalanceNewWork(t *testing.T) {
	nodes := newLBFleet(t, 4, deadAddr(t))
	nodes[0].load.Store(10)
	nodes[1].load.Store(3)
	nodes[2].load.Store(0)
	nodes[2].ready.Store(false) // least loaded, but draining
	nodes[3].load.Store(7)
	pollAll(nodes)
	a := nodes[0].srv.URL
	sess0 := nodes[0].rt.NewID()
	for _, tt := range []struct {
		name, method, path, body string
		hdr                      []string
		want                     int
	}{
		{"new session", "POST", "/sessions", `{"ttl_seconds":60}`, nil, 1},
		{"one-shot run", "POST", "/run", `{"command":["true"]}`, nil, 1},
		{"raw run", "POST", "/raw", `{"command":["true"]}`, nil, 1},
		{"MCP initialize", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, nil, 1},
		{"call in a session", "POST", "/sessions/" + sess0 + "/exec", `{"command":["true"]}`, nil, 0},
		{"run in a session", "POST", "/run", `{"session_id":"` + sess0 + `","command":["true"]}`, nil, 0},
		{"MCP session", "POST", "/mcp", `{}`, []string{mcpSessionHeader, sess0}, 0},
		{"listing", "GET", "/sessions", "", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, a+tt.path, tt.body, tt.hdr...)
			if resp.StatusCode != http.StatusOK || body != tt.body {
				t.Fatalf("%d %q, want 200 and the body echoed", resp.StatusCode, body)
			}
			if got := servedBy(t, nodes); got != tt.want {
				t.Errorf("served by node %d, want %d", got, tt.want)
			}
			if got, want := resp.Header.Get(NodeHeader), nodes[tt.want].rt.Instance(); got != want {
				t.Errorf("%s = %s, want node %d's %s", NodeHeader, got, tt.want, want)
			}
		})
		// Each forward counts the peer one busier until the next poll.
		pollAll(nodes)
	}
}

func TestBalanceMargin(t *testing.T) {
	for _, tt := range []struct {
		name        string
		self, other int64
		selfReady   bool
		want        int
	}{
		{"equal", 5, 5, true, 0},
		{"one less", 5, 4, true, 0},
		{"two less", 5, 3, true, 1},
		{"less than a quarter less", 40, 31, true, 0},
		{"a quarter less", 40, 30, true, 1},
		{"draining forwards", 0, 9, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := newLBFleet(t, 2)
			nodes[0].load.Store(tt.self)
			nodes[0].ready.Store(tt.selfReady)
			nodes[1].load.Store(tt.other)
			pollAll(nodes)
			do(t, "POST", nodes[0].srv.URL+"/sessions", "{}")
			if got := servedBy(t, nodes); got != tt.want {
				t.Errorf("served by node %d, want %d", got, tt.want)
			}
			// Seen from the other side, the move is never worth it back.
			do(t, "POST", nodes[1].srv.URL+"/sessions", "{}")
			if got := servedBy(t, nodes); tt.selfReady && got != 1 {
				t.Errorf("from node 1: served by node %d, want 1", got)
			}
		})
	}
}

func TestBalanceNoPeers(t *testing.T) {
	nodes := newLBFleet(t, 2)
	nodes[0].load.Store(50)
	nodes[0].ready.Store(false)
	nodes[1].ready.Store(false)
	pollAll(nodes)
	// No ready peer: served here, where a draining daemon says so.
	do(t, "POST", nodes[0].srv.URL+"/sessions", "{}")
	if got := servedBy(t, nodes); got != 0 {
		t.Errorf("served by node %d, want 0", got)
	}
	// Not polled yet: unchanged behaviour.
	fresh := newLBFleet(t, 2)
	fresh[0].load.Store(50)
	do(t, "POST", fresh[0].srv.URL+"/sessions", "{}")
	if got := servedBy(t, fresh); got != 0 {
		t.Errorf("unpolled: served by node %d, want 0", got)
	}
}

func TestBalanceForwardedOnce(t *testing.T) {
	nodes := newLBFleet(t, 3)
	nodes[0].load.Store(20)
	nodes[1].load.Store(20)
	nodes[2].load.Store(0)
	pollAll(nodes)
	// Node 0 sent this to node 1 (its loads were older): node 1 serves it,
	// though node 2 is less loaded.
	req, _ := http.NewRequest("POST", nodes[1].srv.URL+"/sessions", bytes.NewReader([]byte("{}")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ForwardedHeader, nodes[0].rt.forwardedValue("203.0.113.9", time.Now(), "POST", "/sessions"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := servedBy(t, nodes); got != 1 {
		t.Errorf("served by node %d, want 1", got)
	}
}

func TestBalanceDeadPeer(t *testing.T) {
	nodes := newLBFleet(t, 2)
	nodes[0].load.Store(20)
	pollAll(nodes)
	nodes[1].srv.Close() // ready at the poll, gone since
	body := `{"command":["true"],"stdin":"all of it"}`
	resp, got := do(t, "POST", nodes[0].srv.URL+"/run", body)
	if resp.StatusCode != http.StatusOK || got != body {
		t.Fatalf("%d %q, want 200 and the whole body served here", resp.StatusCode, got)
	}
	if who := servedBy(t, nodes); who != 0 {
		t.Errorf("served by node %d, want 0", who)
	}
	if id := resp.Header.Get(NodeHeader); id != nodes[0].rt.Instance() {
		t.Errorf("%s = %s, want this node's", NodeHeader, id)
	}
}
