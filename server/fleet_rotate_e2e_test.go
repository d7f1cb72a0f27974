package server_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jaild/jaild/route"
)

// TestFleetKeyRotationE2E: two real daemons rotate their fleet key from A
// to B as docs/fleet.md says, with a standing next key and by their key
// files alone (no restart), one daemon at a time. Sessions made on each
// daemon before the rotation, and during it, keep their state through
// either daemon at every step; once A is dropped, a session minted under it
// is unknown (404) through the other daemon.
func TestFleetKeyRotationE2E(t *testing.T) {
	bin, fn, _ := fleetFixture(t)
	tokens, ta, _ := twoCallers(t)
	newKey := func() []byte { return []byte(rand.Text() + rand.Text()) }
	keyA, keyB, keyC := newKey(), newKey(), newKey()

	// Each daemon has its own files, as each host or pod does.
	type keyFiles struct{ sign, next string }
	files := make([]keyFiles, 2)
	nodes := make([]*fleetNode, 2)
	for i := range nodes {
		dir := t.TempDir()
		files[i] = keyFiles{filepath.Join(dir, "fleet.key"), filepath.Join(dir, "next.key")}
		writeKey(t, files[i].sign, keyA)
		writeKey(t, files[i].next, keyC) // the standing next key: accepted, signs nothing
		nodes[i] = fn.start(t, bin, i, files[i].sign, tokens, "--fleet-key-accept", files[i].next, "--fleet-key-reload", "100ms")
	}

	type session struct {
		id, node string
		calls    int
	}
	callers := []*lbCaller{{t: t, url: nodes[0].d.url, token: ta}, {t: t, url: nodes[1].d.url, token: ta}}
	var sessions []*session
	create := func(i int) *session {
		s := callers[i].create("")
		if s.node != nodes[i].instance {
			t.Fatalf("a session made on node %d went to %s", i, s.node)
		}
		sess := &session{id: s.id, node: s.node}
		sessions = append(sessions, sess)
		return sess
	}
	// check makes a call of every session through each daemon: each
	// sees the calls before it, on the session's daemon.
	check := func(step string) {
		t.Helper()
		for _, s := range sessions {
			for i, c := range callers {
				s.calls++
				out, node := c.runPath(s.id, "echo x >> log; wc -l < log")
				if out != fmt.Sprint(s.calls) || node != s.node {
					t.Fatalf("%s: session of %s through node %d: %q on %s, want %d on %s", step, s.node, i, out, node, s.calls, s.node)
				}
			}
		}
	}
	// reloaded waits for node i to log that it holds these keys.
	reloaded := func(i int, sign []byte, accept ...[]byte) {
		t.Helper()
		var want []string
		for _, a := range accept {
			want = append(want, route.KeyID(a))
		}
		eventually(t, fmt.Sprintf("node %d to sign with %s and accept %v", i, route.KeyID(sign), want), func() bool {
			return logsKeys(nodes[i].d, route.KeyID(sign), want)
		})
	}

	create(0)
	create(1)
	check("before")
	for i, f := range files {
		writeKey(t, f.next, keyB)
		reloaded(i, keyA, keyB)
		check(fmt.Sprintf("1: node %d accepts B", i))
	}
	for i, f := range files {
		// Swapped one file after the other: the daemon may read B in
		// both for a moment, refuses that, and keeps its keys.
		writeKey(t, f.sign, keyB)
		writeKey(t, f.next, keyA)
		reloaded(i, keyB, keyA)
		check(fmt.Sprintf("2: node %d signs with B, accepts A", i))
		create(i)
		check(fmt.Sprintf("2: node %d signs with B, a session made there", i))
	}
	underA := sessions[:2]
	sessions = sessions[2:]
	keyD := newKey()
	for i, f := range files {
		writeKey(t, f.next, keyD)
		reloaded(i, keyB, keyD)
		check(fmt.Sprintf("3: node %d drops A", i))
	}
	// A session minted under A, through the daemon that did not make
	// it: its id is not followed, and that daemon does not know it.
	for i, s := range underA {
		other := 1 - i
		code, data, node := callers[other].do("GET", "/sessions/"+s.id, "")
		if code != 404 || node != nodes[other].instance {
			t.Errorf("after A was dropped, a session of node %d under A through node %d: %d on %s: %s", i, other, code, node, data)
		}
	}
}

// writeKey replaces the key file at p by a rename, as a Secret's update or
// an operator's mv does.
func writeKey(t *testing.T, p string, key []byte) {
	t.Helper()
	if err := os.WriteFile(p+".new", key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
}

// logsKeys reports whether the last keys d logged (at its start, or
// reloaded) are sign and accept, by route.KeyID.
func logsKeys(d *daemon, sign string, accept []string) bool {
	var last struct {
		Sign   string   `json:"sign_key"`
		Accept []string `json:"accept_keys"`
	}
	sc := bufio.NewScanner(bytes.NewReader(d.log.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Msg    string
			Sign   string   `json:"sign_key"`
			Accept []string `json:"accept_keys"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Sign != "" {
			last.Sign, last.Accept = m.Sign, m.Accept
		}
	}
	return last.Sign == sign && slices.Equal(last.Accept, accept)
}
