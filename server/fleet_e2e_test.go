package server_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/route"
)

// fleetFixture skips t with -short, without root or without nsenter, ip
// and the tools named; it builds jaild and returns it, the test's network
// namespaces and a fleet key file.
func fleetFixture(t *testing.T, tools ...string) (bin string, fn *fleetNet, key string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes and network namespaces need root")
	for _, tool := range append(tools, "nsenter", "ip") {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh installs it)", tool)
		}
	}
	bin = buildJaild(t)
	fn = newFleetNet(t)
	key = filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(key, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, fn, key
}

// TestFleetE2E: real jaild daemons, each in a network namespace of its own,
// behind HAProxy balancing round robin (no affinity of any kind): every
// session keeps its state whichever daemon each call lands on, a node added
// at runtime takes new sessions, a draining node keeps serving its sessions
// (through the others) while new work goes elsewhere, and the sessions of
// a node killed (or restarted) answer 410 session_lost while the rest of
// the fleet works on.
func TestFleetE2E(t *testing.T) {
	bin, fn, key := fleetFixture(t, "haproxy")
	tokens, ta, tb := twoCallers(t)
	nodes := make([]*fleetNode, 3)
	for i := range nodes {
		nodes[i] = fn.start(t, bin, i, key, tokens)
	}
	lb := startHAProxy(t, fn, nodes)
	alice := &lbCaller{t: t, url: lb.url, token: ta}

	// Sessions made through the balancer land on each node in turn.
	body := alice.create("")
	path := alice.create("")
	files := alice.create("")
	if len(map[string]bool{body.node: true, path.node: true, files.node: true}) != 3 {
		t.Errorf("three sessions through round robin landed on %s %s %s, want three nodes", body.node, path.node, files.node)
	}
	mcpSess := alice.mcpInit()

	t.Run("state kept through a dumb balancer", func(t *testing.T) {
		for i := 1; i <= 10; i++ {
			cmd := fmt.Sprintf("echo %d >> log; wc -l < log", i)
			if out, node := alice.runBody(body.id, cmd); out != fmt.Sprint(i) || node != body.node {
				t.Errorf("body call %d: %q on node %s, want %d on %s", i, out, node, i, body.node)
			}
			if out, node := alice.runPath(path.id, cmd); out != fmt.Sprint(i) || node != path.node {
				t.Errorf("path call %d: %q on node %s, want %d on %s", i, out, node, i, path.node)
			}
			name := fmt.Sprintf("/sessions/%s/files/f%d", files.id, i)
			if code, _, _ := alice.do("PUT", name, "content "+fmt.Sprint(i), "Content-Type", "application/octet-stream"); code != 204 {
				t.Errorf("PUT file %d: %d", i, code)
			}
			if code, data, node := alice.do("GET", name, ""); code != 200 || string(data) != "content "+fmt.Sprint(i) || node != files.node {
				t.Errorf("GET file %d: %d %q on %s", i, code, data, node)
			}
			if out := alice.mcpBash(mcpSess, cmd); out != fmt.Sprintf("%d\n", i) {
				t.Errorf("MCP call %d: %q", i, out)
			}
		}
		// The files API and the calls see the same /work.
		if out, _ := alice.runBody(files.id, "cat f3"); out != "content 3" {
			t.Errorf("a call sees the uploaded file: %q", out)
		}
		// Another caller's session is as unknown through a peer as on
		// its node.
		bob := &lbCaller{t: t, url: lb.url, token: tb}
		if code, data, _ := bob.do("GET", "/sessions/"+body.id, ""); code != 404 {
			t.Errorf("bob reads alice's session: %d %s", code, data)
		}
	})

	t.Run("hop", func(t *testing.T) {
		// A session call served by its node and forwarded once, side by
		// side, interleaved (docs/fleet.md has the figures).
		owner := nodeOf(t, nodes, files.node)
		var other *fleetNode
		for _, n := range nodes {
			if n != owner {
				other = n
			}
		}
		direct := &lbCaller{t: t, url: owner.d.url, token: ta}
		via := &lbCaller{t: t, url: other.d.url, token: ta}
		var local, forwarded []time.Duration
		for range 15 {
			for _, c := range []struct {
				c *lbCaller
				d *[]time.Duration
			}{{direct, &local}, {via, &forwarded}} {
				start := time.Now()
				if out, node := c.c.runPath(files.id, "echo x"); out != "x" || node != owner.instance {
					t.Fatalf("call: %q on %s", out, node)
				}
				*c.d = append(*c.d, time.Since(start))
			}
		}
		t.Logf("session call (echo x): local median %v p90 %v; forwarded once median %v p90 %v",
			quantile(local, 0.5), quantile(local, 0.9), quantile(forwarded, 0.5), quantile(forwarded, 0.9))
	})

	outer := t // what a subtest starts for the rest of the test
	t.Run("a node added at runtime takes new sessions", func(t *testing.T) {
		n4 := fn.start(outer, bin, 3, key, tokens)
		nodes = append(nodes, n4)
		lb.addServer(t, n4)
		var mine *lbSession
		var seen []string
		for i := 0; i < 12 && mine == nil; i++ {
			s := alice.create("")
			seen = append(seen, s.node)
			if s.node == n4.instance {
				mine = &s
			}
		}
		if mine == nil {
			t.Fatalf("no new session landed on the fourth node (%s): %v\n%s", n4.instance, seen, lb.runtime(t, "show servers state jaild"))
		}
		for i := 1; i <= 4; i++ {
			if out, node := alice.runBody(mine.id, fmt.Sprintf("echo %d >> log; wc -l < log", i)); out != fmt.Sprint(i) || node != n4.instance {
				t.Errorf("call %d in the fourth node's session: %q on %s", i, out, node)
			}
		}
	})

	// The drained node is the body session's, the killed one the path
	// session's.
	drained, killed := nodeOf(t, nodes, body.node), nodeOf(t, nodes, path.node)
	t.Run("drain", func(t *testing.T) {
		drained.d.cmd.Process.Signal(syscall.SIGTERM)
		eventually(t, "/readyz of the draining node to fail", func() bool {
			r, _ := get(t, drained.d.url+"/readyz")
			return r.StatusCode == 503
		})
		lb.waitDown(t, drained)
		for i := 11; i <= 15; i++ {
			if out, node := alice.runBody(body.id, fmt.Sprintf("echo %d >> log; wc -l < log", i)); out != fmt.Sprint(i) || node != drained.instance {
				t.Errorf("call %d in the draining node's session: %q on %s", i, out, node)
			}
		}
		for i := 0; i < 4; i++ {
			if s := alice.create(""); s.node == drained.instance {
				t.Errorf("a new session went to the draining node")
			}
			if code, data, node := alice.do("POST", "/run", `{"command":"true"}`, "Content-Type", "application/json"); code != 200 || node == drained.instance {
				t.Errorf("one-shot run while a node drains: %d on %s: %s", code, node, data)
			}
		}
	})

	t.Run("kill -9", func(t *testing.T) {
		killed.d.cmd.Process.Signal(syscall.SIGKILL)
		<-killed.d.exited
		killed.d.exited <- nil
		lostCheck := func(t *testing.T) {
			t.Helper()
			for _, c := range []struct{ method, path, body string }{
				{"POST", "/run", fmt.Sprintf(`{"command":"true","session_id":%q}`, path.id)},
				{"POST", "/sessions/" + path.id + "/run", `{"command":"true"}`},
				{"GET", "/sessions/" + path.id, ""},
			} {
				code, data, _ := alice.do(c.method, c.path, c.body, "Content-Type", "application/json")
				var e api.ErrorResponse
				json.Unmarshal(data, &e)
				if code != 410 || e.Code != api.CodeSessionLost || !strings.Contains(e.Error, path.id) {
					t.Errorf("%s %s of the killed node's session: %d %s", c.method, c.path, code, data)
				}
			}
		}
		lostCheck(t)
		// Nothing else breaks: the other sessions, new ones, one-shot runs.
		if out, _ := alice.runBody(files.id, "cat f10"); out != "content 10" {
			t.Errorf("another node's session after the kill: %q", out)
		}
		if mcpSess.node == killed.instance {
			if code, _, _ := alice.mcp(mcpSess, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); code != 410 {
				t.Errorf("the killed node's MCP session: %d, want 410", code)
			}
		} else if out := alice.mcpBash(mcpSess, "wc -l < log"); out != "10\n" {
			t.Errorf("MCP session after the kill: %q", out)
		}
		s := alice.create("")
		if out, _ := alice.runPath(s.id, "echo new"); out != "new" {
			t.Errorf("a new session after the kill: %q", out)
		}
		// A daemon started again at the same address is another
		// instance: the old sessions stay lost, never a stranger's 404.
		old := killed.instance
		killed.serve(outer)
		if killed.instance == old {
			t.Fatalf("the restarted daemon has its predecessor's instance id")
		}
		lb.waitUp(t, killed)
		lostCheck(t)
	})
}

// TestFleetBalanceE2E: daemons that know their peers (--peers) send new
// sessions to the least-loaded ready daemon, and a peer killed outright
// is skipped: a new session is served by the daemon asked or a live peer,
// never lost. The sessions are made on each daemon directly, as a
// balancer that picked that daemon would send them.
func TestFleetBalanceE2E(t *testing.T) {
	bin, fn, key := fleetFixture(t)
	tokens, ta, _ := twoCallers(t)
	var peers []string
	for i := range 3 {
		peers = append(peers, "--peers", fmt.Sprintf("%s%d:8080", fn.prefix, 10+i))
	}
	// Each is started once the one before has its load: a daemon whose
	// peers are not up yet serves everything itself. Each is ready (its
	// first health check, which builds a sandbox, done) before it is
	// given work, so that every poll of it answers at once with its
	// load.
	start := func(i int, extra ...string) *fleetNode {
		n := fn.start(t, bin, i, key, tokens, append(extra, peers...)...)
		eventually(t, "node "+n.ip+" to be ready", func() bool {
			resp, _ := get(t, n.d.url+"/readyz")
			return resp.StatusCode == 200
		})
		return n
	}
	createOn := func(n *fleetNode, count int) []lbSession {
		t.Helper()
		c := &lbCaller{t: t, url: n.d.url, token: ta}
		var out []lbSession
		for range count {
			out = append(out, c.create(""))
		}
		return out
	}
	a := start(0, "--debug") // its polls are logged
	for _, s := range createOn(a, 6) {
		if s.node != a.instance {
			t.Fatalf("a session made on the only daemon up went to %s", s.node)
		}
	}
	b := start(1)
	for _, s := range createOn(b, 3) {
		if s.node != b.instance {
			t.Errorf("a session made on the less loaded daemon went to %s, not %s", s.node, b.instance)
		}
	}
	c := start(2)
	// Polls that began before the others had their loads may end after
	// it: wait for one that saw them.
	eventually(t, "the first daemon to poll the loads 6, 3 and 0", func() bool {
		l := lastLoads(a.d)
		return l[a.ip+":8080"] >= 6 && l[b.ip+":8080"] == 3 && l[c.ip+":8080"] == 0 && len(l) == 3
	})

	t.Run("least loaded", func(t *testing.T) {
		// Loads: 6 on the first, 3 on the second, 0 on the third.
		for i, s := range createOn(a, 2) {
			if s.node != c.instance {
				t.Errorf("session %d made on the busiest daemon went to %s, want the least loaded, %s (the others: %s, %s)",
					i, s.node, c.instance, a.instance, b.instance)
			}
		}
	})

	t.Run("dead peer skipped", func(t *testing.T) {
		// The third, least loaded still in the first's view until its
		// next poll, dies.
		c.d.cmd.Process.Signal(syscall.SIGKILL)
		<-c.d.exited
		c.d.exited <- nil
		caller := &lbCaller{t: t, url: a.d.url, token: ta}
		for i, s := range createOn(a, 3) {
			if s.node != a.instance && s.node != b.instance {
				t.Errorf("session %d made with a dead peer went to %s", i, s.node)
			}
			if out, node := caller.runPath(s.id, "echo ok"); out != "ok" || node != s.node {
				t.Errorf("a call in session %d: %q on %s", i, out, node)
			}
		}
		t.Logf("the dead peer was met at a forward (served here) %d times",
			bytes.Count(a.d.log.Bytes(), []byte("the least-loaded peer is unreachable: served here")))
		// Once a poll has found it gone, it is no candidate at all.
		eventually(t, "the first daemon to see the third gone", func() bool {
			return logHas(a.d, "fleet peer not ready: no new work goes to it", c.ip+":8080")
		})
		for i, s := range createOn(a, 2) {
			if s.node != a.instance && s.node != b.instance {
				t.Errorf("session %d made after the poll went to %s", i, s.node)
			}
		}
	})
}

// lastLoads is the loads of the ready daemons in d's last poll, by
// address (nil before its first).
func lastLoads(d *daemon) map[string]float64 {
	var loads map[string]float64
	sc := bufio.NewScanner(bytes.NewReader(d.log.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Msg   string
			Loads map[string]float64
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && strings.HasPrefix(m.Msg, "fleet polled") {
			loads = m.Loads
		}
	}
	return loads
}

// logHas reports whether d logged msg with the given node attribute.
func logHas(d *daemon, msg, node string) bool {
	sc := bufio.NewScanner(bytes.NewReader(d.log.Bytes()))
	for sc.Scan() {
		var m struct{ Msg, Node string }
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == msg && m.Node == node {
			return true
		}
	}
	return false
}

// fleetNet is a bridge on the host and, per node, a network namespace
// joined to it by a veth pair, all on a /24 of 10.213.0.0/16 drawn at
// random (so that concurrent runs do not collide). Everything is removed
// at cleanup.
type fleetNet struct {
	tag    string // unique name part
	prefix string // "10.213.N."
	bridge string
}

func newFleetNet(t *testing.T) *fleetNet {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	fn := &fleetNet{tag: fmt.Sprintf("%02x%02x", b[0], b[1]), prefix: fmt.Sprintf("10.213.%d.", 1+int(b[0])%250)}
	fn.bridge = "jrb" + fn.tag
	t.Cleanup(func() { exec.Command("ip", "link", "del", fn.bridge).Run() })
	mustRun(t, "ip", "link", "add", fn.bridge, "type", "bridge")
	mustRun(t, "ip", "addr", "add", fn.prefix+"1/24", "dev", fn.bridge)
	mustRun(t, "ip", "link", "set", fn.bridge, "up")
	return fn
}

func mustRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

type fleetNode struct {
	in       *e2eInstall
	d        *daemon
	args     []string
	ip       string
	instance string
}

// start makes node i's namespace (once) and starts jaild serve in it, with
// the extra flags.
func (fn *fleetNet) start(t *testing.T, bin string, i int, key, tokens string, extra ...string) *fleetNode {
	t.Helper()
	ns := fmt.Sprintf("jrn%s-%d", fn.tag, i)
	host, peer := fmt.Sprintf("jrh%s%d", fn.tag, i), fmt.Sprintf("jrp%s%d", fn.tag, i)
	ip := fmt.Sprintf("%s%d", fn.prefix, 10+i)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", ns).Run()
		exec.Command("ip", "link", "del", host).Run()
	})
	mustRun(t, "ip", "netns", "add", ns)
	mustRun(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	mustRun(t, "ip", "link", "set", host, "master", fn.bridge, "up")
	mustRun(t, "ip", "link", "set", peer, "netns", ns)
	mustRun(t, "ip", "-n", ns, "addr", "add", ip+"/24", "dev", peer)
	mustRun(t, "ip", "-n", ns, "link", "set", peer, "up")
	mustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")

	n := &fleetNode{in: newE2EInstall(t, bin), ip: ip}
	// Not ip netns exec, which remounts /sys (jaild then finds no
	// cgroups): nsenter joins the network namespace alone.
	n.in.wrap = []string{"nsenter", "--net=/run/netns/" + ns, "--"}
	addr := ip + ":8080"
	n.args = []string{"--listen", addr, "--insecure-plaintext", "--token-file", tokens,
		"--fleet-key", key, "--advertise-addr", addr, "--peer-cidr", fn.prefix + "0/24",
		"--trusted-proxy", fn.prefix + "1", "--max-conns-per-peer", "0",
		"--max-sessions-per-caller", "32", "--audit-log", "off", "--pool", "0", "--drain-timeout", "10m", "--drain-idle", "10m"}
	n.args = append(n.args, extra...)
	n.serve(t)
	return n
}

// serve starts the node's daemon. At cleanup it gets a first SIGTERM before
// serve's own: a draining daemon (its drain lasts minutes here) stops at
// the second.
func (n *fleetNode) serve(t *testing.T) {
	t.Helper()
	d := n.in.serve(t, n.args...)
	t.Cleanup(func() {
		// Signals do not queue: the second must follow the first's
		// handling, not merge with it.
		d.cmd.Process.Signal(syscall.SIGTERM)
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !bytes.Contains(d.log.Bytes(), []byte("draining")); {
			time.Sleep(20 * time.Millisecond)
		}
	})
	n.d, n.instance = d, instanceOf(t, d)
}

// instanceOf reads the daemon's instance id from its log.
func instanceOf(t *testing.T, d *daemon) string {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(d.log.Bytes()))
	for sc.Scan() {
		var m struct{ Msg, Instance string }
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Instance != "" {
			return m.Instance
		}
	}
	t.Fatalf("no instance id in the daemon's log:\n%s", d.log.Bytes())
	return ""
}

func nodeOf(t *testing.T, nodes []*fleetNode, instance string) *fleetNode {
	t.Helper()
	for _, n := range nodes {
		if n.instance == instance {
			return n
		}
	}
	t.Fatalf("no node has instance %q", instance)
	return nil
}

// haproxy is a private HAProxy in the foreground, with its runtime API on
// a unix socket.
type haproxy struct {
	url  string
	sock string
}

func startHAProxy(t *testing.T, fn *fleetNet, nodes []*fleetNode) *haproxy {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := &haproxy{url: "http://" + addr, sock: filepath.Join(dir, "admin.sock")}
	var servers strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&servers, "    server n%d %s:8080 check\n", i, n.ip)
	}
	// Round robin without stickiness: each call may land anywhere. The
	// health check takes a draining node out; retry-on 503 with
	// redispatch sends the new work it refused elsewhere.
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 2m
    timeout server 2m
    retries 3
    option redispatch
    retry-on conn-failure empty-response 503
frontend fe
    bind %s
    option forwardfor
    default_backend jaild
backend jaild
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 300ms fall 1 rise 1
%s`, h.sock, addr, servers.String())
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-f", path, "-db")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy log:\n%s", log.Bytes())
		}
	})
	for _, n := range nodes {
		h.waitUp(t, n)
	}
	return h
}

// runtime sends one command to HAProxy's runtime API and returns the answer.
func (h *haproxy) runtime(t *testing.T, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", h.sock, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s\n", cmd)
	out, _ := io.ReadAll(c)
	return string(out)
}

// addServer adds n to the backend at runtime, health-checked like the
// others (a dynamic server inherits no default-server settings).
func (h *haproxy) addServer(t *testing.T, n *fleetNode) {
	t.Helper()
	name := "jaild/n" + n.ip[strings.LastIndexByte(n.ip, '.')+1:]
	for _, cmd := range []string{
		fmt.Sprintf("add server %s %s:8080 check port 8080 inter 300ms fall 1 rise 1", name, n.ip),
		"enable health " + name,
		"enable server " + name,
	} {
		if out := h.runtime(t, cmd); strings.Contains(strings.ToLower(out), "error") || strings.Contains(out, "not") {
			t.Fatalf("haproxy %q: %s", cmd, out)
		}
	}
	h.waitUp(t, n)
}

// serverState is the operational state HAProxy gives n (2: up, 0: down).
func (h *haproxy) serverState(t *testing.T, n *fleetNode) string {
	for _, line := range strings.Split(h.runtime(t, "show servers state jaild"), "\n") {
		f := strings.Fields(line)
		// be_id be_name srv_id srv_name srv_addr srv_op_state ...
		if len(f) > 5 && f[4] == n.ip {
			return f[5]
		}
	}
	return ""
}

func (h *haproxy) waitUp(t *testing.T, n *fleetNode) {
	t.Helper()
	eventually(t, "haproxy to take "+n.ip+" in", func() bool { return h.serverState(t, n) == "2" })
}

func (h *haproxy) waitDown(t *testing.T, n *fleetNode) {
	t.Helper()
	eventually(t, "haproxy to take "+n.ip+" out", func() bool { return h.serverState(t, n) == "0" })
}

// lbCaller calls the fleet through the balancer with a token.
type lbCaller struct {
	t     *testing.T
	url   string
	token string
}

type lbSession struct{ id, node string }

// do sends a request and returns the status, the body and the node that
// served it (route.NodeHeader).
func (c *lbCaller) do(method, path, body string, header ...string) (int, []byte, string) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	cl := &http.Client{Timeout: time.Minute}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp.Header.Get(route.NodeHeader)
}

func (c *lbCaller) create(body string) lbSession {
	c.t.Helper()
	if body == "" {
		body = "{}"
	}
	code, data, node := c.do("POST", "/sessions", body, "Content-Type", "application/json")
	var s api.Session
	if code != 201 || json.Unmarshal(data, &s) != nil || len(s.ID) > 128 {
		c.t.Fatalf("create a session: %d %s", code, data)
	}
	return lbSession{s.ID, node}
}

// runBody runs command with POST /run and session_id; runPath with POST
// /sessions/{id}/run. Both return the trimmed stdout and the node.
func (c *lbCaller) runBody(id, command string) (string, string) {
	c.t.Helper()
	return c.run("/run", fmt.Sprintf(`{"command":%q,"session_id":%q}`, command, id))
}

func (c *lbCaller) runPath(id, command string) (string, string) {
	c.t.Helper()
	return c.run("/sessions/"+id+"/run", fmt.Sprintf(`{"command":%q}`, command))
}

func (c *lbCaller) run(path, body string) (string, string) {
	c.t.Helper()
	code, data, node := c.do("POST", path, body, "Content-Type", "application/json")
	var res api.Response
	if code != 200 || json.Unmarshal(data, &res) != nil {
		c.t.Errorf("POST %s: %d %s", path, code, data)
	}
	return strings.TrimSpace(res.Stdout + res.Stderr), node
}

// MCP over raw JSON-RPC on Streamable HTTP, each message through the
// balancer.
type mcpSession struct{ id, node string }

func (c *lbCaller) mcp(sess *mcpSession, msg string) (int, map[string]any, http.Header) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.url+"/mcp", strings.NewReader(msg))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sess != nil {
		req.Header.Set("Mcp-Session-Id", sess.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		c.t.Fatalf("MCP %s: %v", msg, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	// The answer is JSON or an SSE stream; the response is the message
	// with an id.
	var out map[string]any
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimPrefix(line, "data: ")
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["id"] != nil {
			out = m
		}
	}
	if resp.StatusCode/100 == 2 && out == nil && resp.StatusCode != 202 {
		c.t.Errorf("MCP answer without a response: %d %s", resp.StatusCode, data)
	}
	return resp.StatusCode, out, resp.Header
}

func (c *lbCaller) mcpInit() *mcpSession {
	c.t.Helper()
	code, _, h := c.mcp(nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fleet-e2e","version":"1"}}}`)
	s := &mcpSession{id: h.Get("Mcp-Session-Id"), node: h.Get(route.NodeHeader)}
	if code != 200 || s.id == "" {
		c.t.Fatalf("MCP initialize: %d, session %q", code, s.id)
	}
	if code, _, _ := c.mcp(s, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != 202 {
		c.t.Fatalf("MCP initialized: %d", code)
	}
	return s
}

// mcpBash calls the bash tool and returns its stdout.
func (c *lbCaller) mcpBash(s *mcpSession, command string) string {
	c.t.Helper()
	args, _ := json.Marshal(map[string]any{"name": "bash", "arguments": map[string]any{"command": command}})
	code, out, _ := c.mcp(s, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+string(args)+`}`)
	res, _ := out["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	stdout, _ := sc["stdout"].(string)
	if code != 200 || sc == nil {
		c.t.Errorf("MCP bash %q: %d %v", command, code, out)
	}
	return stdout
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))].Round(10 * time.Microsecond)
}
