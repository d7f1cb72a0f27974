package route

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// The keys of a rotation: a fleet signing with keyA moves to keyB.
var (
	keyA = testKey
	keyB = []byte("the next fleet key, 32 bytes or more")
)

// wantRouted checks that a request for id sent to node via is served by
// node at, with a forwarded header that node at takes as its fleet's
// (the caller's address carried) when the two differ.
func (f *fleet) wantRouted(t *testing.T, step, id string, via, at int) {
	t.Helper()
	resp, _ := do(t, "GET", f.srvs[via].URL+"/sessions/"+id+"/jobs", "")
	r := f.served(at)
	for i := range f.got {
		if i != at && f.served(i) != nil {
			t.Errorf("%s: via node %d: node %d served a session of node %d", step, via, i, at)
		}
	}
	if resp.StatusCode != 200 || r == nil || resp.Header.Get(NodeHeader) != f.rts[at].Instance() {
		t.Fatalf("%s: via node %d: %d, served by %q, want node %d (%q)", step, via, resp.StatusCode, resp.Header.Get(NodeHeader), at, f.rts[at].Instance())
	}
	if via == at {
		return
	}
	if peer, ok := f.rts[at].ForwardedPeer(r); !ok || peer != "203.0.113.9" {
		t.Errorf("%s: via node %d: node %d refused the forwarded header (%q %v)", step, via, at, peer, ok)
	}
}

// wantUnknown checks that a request for id sent to node via is served
// there, as an unknown id: its route token is not followed.
func (f *fleet) wantUnknown(t *testing.T, step, id string, via int) {
	t.Helper()
	resp, _ := do(t, "GET", f.srvs[via].URL+"/sessions/"+id+"/jobs", "")
	if resp.StatusCode != 200 || f.served(via) == nil {
		t.Errorf("%s: via node %d: %d, not served there", step, via, resp.StatusCode)
	}
	for i := range f.got {
		if i != via && f.served(i) != nil {
			t.Errorf("%s: via node %d: followed to node %d", step, via, i)
		}
	}
}

// TestAcceptKeys: a token or a forwarded header MACed under an accepted
// key holds as one under the signing key does; under a key the daemon does
// not accept, neither holds, as before there were accepted keys.
func TestAcceptKeys(t *testing.T) {
	t.Run("id minted under an accepted key is routed", func(t *testing.T) {
		// Node 0 signs with B and accepts A; node 1 minted its id under
		// A and accepts B (it has done step 1, node 0 step 2).
		f := newFleet(t, 2, nil)
		id := f.rts[1].NewID()
		mustSetKeys(t, f.rts[1], keyA, keyB)
		mustSetKeys(t, f.rts[0], keyB, keyA)
		f.wantRouted(t, "minted under A", id, 0, 1)
		f.wantRouted(t, "minted under A", id, 1, 1)
	})
	t.Run("own id minted under the old signing key is served here", func(t *testing.T) {
		f := newFleet(t, 2, nil)
		id := f.rts[0].NewID()
		mustSetKeys(t, f.rts[0], keyB, keyA)
		mustSetKeys(t, f.rts[1], keyB, keyA)
		f.wantRouted(t, "own id", id, 0, 0)
		f.wantRouted(t, "own id", id, 1, 0)
	})
	t.Run("id under a key not accepted is not followed", func(t *testing.T) {
		f := newFleet(t, 2, nil)
		id := f.rts[1].NewID()
		mustSetKeys(t, f.rts[0], keyB)
		f.wantUnknown(t, "minted under A, node 0 holds B alone", id, 0)
	})
	t.Run("forwarded header", func(t *testing.T) {
		signA := newTestRouter(t, "10.213.0.1:8080", keyA)
		now := strconv.FormatInt(time.Now().Unix(), 10)
		r := httptest.NewRequest("GET", "/sessions/x/jobs", nil)
		r.Header.Set(ForwardedHeader, signA.forwardedValue("198.51.100.7", time.Now(), "GET", "/sessions/x/jobs"))
		for _, tt := range []struct {
			name   string
			keys   [][]byte
			accept bool
		}{
			{"signs with A", [][]byte{keyA}, true},
			{"signs with B, accepts A", [][]byte{keyB, keyA}, true},
			{"signs with A, accepts B", [][]byte{keyA, keyB}, true},
			{"signs with B alone", [][]byte{keyB}, false},
			{"signs with B, accepts another", [][]byte{keyB, []byte("some third key, at least 32 bytes")}, false},
		} {
			rt := newTestRouter(t, "10.213.0.2:8080", tt.keys[0])
			mustSetKeys(t, rt, tt.keys...)
			if peer, ok := rt.ForwardedPeer(r); ok != tt.accept || (ok && peer != "198.51.100.7") {
				t.Errorf("%s: ForwardedPeer = %q %v, want %v", tt.name, peer, ok, tt.accept)
			}
			// Moved to another request line, or with its MAC
			// changed, it holds under no key.
			moved := httptest.NewRequest("GET", "/sessions/y/jobs", nil)
			moved.Header.Set(ForwardedHeader, r.Header.Get(ForwardedHeader))
			forged := httptest.NewRequest("GET", "/sessions/x/jobs", nil)
			forged.Header.Set(ForwardedHeader, "198.51.100.7;"+now+";AAAAAAAAAAAAAAAA")
			for _, bad := range []*http.Request{moved, forged} {
				if _, ok := rt.ForwardedPeer(bad); ok {
					t.Errorf("%s: ForwardedPeer took %s on %s", tt.name, bad.Header.Get(ForwardedHeader), bad.URL.Path)
				}
			}
		}
	})
	t.Run("forwarded under a key the peer does not accept", func(t *testing.T) {
		// Node 0 signs with B before node 1 accepts it (a rotation's
		// steps out of order): the id is followed, but node 1 does
		// not take the request as its fleet's.
		f := newFleet(t, 2, nil)
		id := f.rts[1].NewID()
		mustSetKeys(t, f.rts[0], keyB, keyA)
		resp, _ := do(t, "GET", f.srvs[0].URL+"/sessions/"+id+"/jobs", "")
		r := f.served(1)
		if resp.StatusCode != 200 || r == nil {
			t.Fatalf("%d: not forwarded", resp.StatusCode)
		}
		if _, ok := f.rts[1].ForwardedPeer(r); ok {
			t.Error("node 1 took a header MACed under a key it does not accept")
		}
	})
}

// TestRotation: two daemons step through a rotation from A to B, one at a
// time, as a rolling change does; sessions made before and during it keep
// being served by their daemon, through either, at every step. After the
// last step, an id minted under A is what an id under any unknown key is.
func TestRotation(t *testing.T) {
	f := newFleet(t, 2, nil) // both sign with A
	old := f.rts[1].NewID()
	ids := map[string]int{old: 1, f.rts[0].NewID(): 0}
	check := func(step string) {
		t.Helper()
		for id, at := range ids {
			f.wantRouted(t, step, id, 0, at)
			f.wantRouted(t, step, id, 1, at)
		}
	}
	check("before")
	steps := []struct {
		name string
		keys [][]byte // node i's keys, signing key first
	}{
		{"1: accept B", [][]byte{keyA, keyB}},
		{"2: sign with B, accept A", [][]byte{keyB, keyA}},
	}
	for _, s := range steps {
		for i, rt := range f.rts {
			mustSetKeys(t, rt, s.keys...)
			check(s.name + " on node " + strconv.Itoa(i))
			// A session made now, on the daemon just changed.
			ids[rt.NewID()] = i
			check(s.name + " on node " + strconv.Itoa(i) + ", new session")
		}
	}
	// 3: A is dropped once the sessions minted under it are gone; these
	// are not, to show what then becomes of them.
	var underA []string
	for id := range ids {
		if _, ok := (&keyring{keys: [][]byte{keyB}}).parse(id); !ok {
			underA = append(underA, id)
			delete(ids, id)
		}
	}
	for i, rt := range f.rts {
		mustSetKeys(t, rt, keyB)
		check("3: drop A on node " + strconv.Itoa(i))
	}
	for _, id := range underA {
		f.wantUnknown(t, "3: id minted under A", id, 0)
	}
	if len(underA) != 2+2 || len(ids) != 2 {
		t.Errorf("%d ids minted under A, %d under B; want 4 and 2", len(underA), len(ids))
	}
}

// TestKeyErrors: New and SetKeys refuse short keys and a key given twice;
// a refused SetKeys keeps the keys in use.
func TestKeyErrors(t *testing.T) {
	short := []byte("0123456789")
	for _, tt := range []struct {
		name   string
		key    []byte
		accept [][]byte
	}{
		{"short signing key", short, nil},
		{"short accepted key", keyA, [][]byte{short}},
		{"signing key accepted", keyA, [][]byte{keyB, append([]byte(nil), keyA...)}},
		{"accepted twice", keyA, [][]byte{keyB, append([]byte(nil), keyB...)}},
	} {
		if _, err := New(Config{Key: tt.key, AcceptKeys: tt.accept, Advertise: netip.MustParseAddrPort("10.213.0.2:8080")}); err == nil {
			t.Errorf("%s: New accepted it", tt.name)
		} else {
			t.Logf("%s: %v", tt.name, err)
		}
		rt := newTestRouter(t, "10.213.0.2:8080", keyA)
		id := rt.NewID()
		if err := rt.SetKeys(tt.key, tt.accept); err == nil {
			t.Errorf("%s: SetKeys accepted it", tt.name)
		}
		if tok, ok := rt.keys.Load().parse(id); !ok || tok != rt.self || len(rt.keys.Load().keys) != 1 {
			t.Errorf("%s: a refused SetKeys changed the keys", tt.name)
		}
	}
}

func mustSetKeys(t *testing.T, rt *Router, keys ...[]byte) {
	t.Helper()
	if err := rt.SetKeys(keys[0], keys[1:]); err != nil {
		t.Fatal(err)
	}
}

func TestKeyID(t *testing.T) {
	a, b := KeyID(keyA), KeyID(keyB)
	if len(a) != 8 || a == b || a != KeyID(append([]byte(nil), keyA...)) {
		t.Errorf("KeyID: %q for A, %q for B", a, b)
	}
}

// TestSetKeysWhileServing: keys swapped while requests are routed (run
// with -race): every state the swaps go through accepts both keys, so no
// request is ever served by the wrong daemon.
func TestSetKeysWhileServing(t *testing.T) {
	f := newFleet(t, 2, nil)
	ids := []string{f.rts[1].NewID()}
	mustSetKeys(t, f.rts[1], keyB, keyA)
	ids = append(ids, f.rts[1].NewID())
	mustSetKeys(t, f.rts[0], keyA, keyB)
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			keys := [][][]byte{{keyA, keyB}, {keyB, keyA}}[n%2]
			if err := f.rts[0].SetKeys(keys[0], keys[1:]); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 200 {
		id := ids[i%2]
		resp, _ := do(t, "GET", f.srvs[0].URL+"/sessions/"+id+"/jobs", "")
		if resp.StatusCode != 200 || resp.Header.Get(NodeHeader) != f.rts[1].Instance() {
			t.Fatalf("request %d: %d from %q, want node 1", i, resp.StatusCode, resp.Header.Get(NodeHeader))
		}
		r := <-f.got[1]
		if _, ok := f.rts[1].ForwardedPeer(r); !ok {
			t.Fatalf("request %d: node 1 refused the forwarded header", i)
		}
	}
	close(stop)
	t.Logf("%d swaps while serving 200 requests", <-swapped)
}
