package egress_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"

	// The test binary is re-executed as each sandbox's init.
	_ "github.com/jaild/jaild/internal/inithook"
)

// sandboxed is a Manager on a private installation, closed at cleanup,
// after which testenv checks that nothing (netns pins included) is left.
func sandboxed(t *testing.T) *jail.Manager {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	env := testenv.New(t, "jaild-egress")
	m, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func upstreamHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://denied.test/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "hello from upstream host=%s\n", r.Host)
	})
}

// TestSandboxEgress runs real sandboxes whose only way out is the proxy,
// against an upstream in a network namespace of the test's own: curl and
// Python reach allowed names over HTTP and HTTPS (CONNECT); everything
// else is refused, and nothing leaves the sandbox but through the proxy.
func TestSandboxEgress(t *testing.T) {
	m := sandboxed(t)
	up := testenv.NewUpstream(t, upstreamHandler())
	resolver := &recorder{hosts: egress.Hosts{Table: map[string][]netip.Addr{
		"up.test":      {up.Addr},
		"denied.test":  {up.Addr},
		"meta.test":    {netip.MustParseAddr("169.254.169.254")},
		"private.test": {netip.MustParseAddr("10.0.0.1")},
		"loop.test":    {netip.MustParseAddr("127.0.0.1")},
		"host.test":    {up.HostAddr},
	}}}
	p := egress.New(egress.Config{
		Allow:    pats(t, "up.test:80", "up.test:443", "meta.test:*", "private.test:*", "loop.test:*", "host.test:*"),
		Resolver: resolver,
	})
	py := func(code string) string { return "python3 -c '" + code + "' 2>&1" }
	urlopen := "import urllib.request, ssl; print(urllib.request.urlopen(\"%s\", context=ssl._create_unverified_context(), timeout=10).read().decode().strip())"
	upstreamIP := up.Addr.String()
	tests := []struct {
		name  string
		cmd   string
		want  string
		usage func(box.EgressUsage) bool
	}{
		{"curl http by name", "curl -sS http://up.test/", "hello from upstream host=up.test\n",
			func(u box.EgressUsage) bool {
				return u.Connections == 1 && u.Denied == 0 && u.BytesIn > 0 && u.BytesOut > 0
			}},
		{"curl https by name (CONNECT)", "curl -sSk https://up.test/", "hello from upstream host=up.test\n",
			func(u box.EgressUsage) bool { return u.Connections == 1 && u.BytesIn > 1000 }},
		{"python http", py(fmt.Sprintf(urlopen, "http://up.test/")), "hello from upstream host=up.test\n", nil},
		{"python https", py(fmt.Sprintf(urlopen, "https://up.test/")), "hello from upstream host=up.test\n", nil},
		{"not allowed", "curl -s -w ' %{http_code}' http://other.test/", "jaild egress: other.test:80 is not in the egress allowlist\n 403",
			func(u box.EgressUsage) bool { return u.Connections == 0 && u.Denied == 1 }},
		{"https not allowed", "curl -sS https://other.test/ 2>&1 | grep -o 'CONNECT tunnel failed, response 403'", "CONNECT tunnel failed, response 403\n", nil},
		{"wrong port", "curl -s http://up.test:8080/", "jaild egress: up.test:8080 is not in the egress allowlist\n", nil},
		{"metadata", "curl -s http://meta.test/latest/meta-data/", "jaild egress: meta.test:80 is refused: 169.254.169.254 is link-local (cloud metadata)\n", nil},
		{"metadata by IP", "curl -s http://169.254.169.254/", "jaild egress: 169.254.169.254:80 is not in the egress allowlist\n", nil},
		{"private", "curl -s http://private.test/", "jaild egress: private.test:80 is refused: 10.0.0.1 is private\n", nil},
		{"loopback", "curl -s http://loop.test/", "jaild egress: loop.test:80 is refused: 127.0.0.1 is loopback\n", nil},
		{"the host's own address", "curl -s http://host.test/", "jaild egress: host.test:80 is refused: " + up.HostAddr.String() + " is one of the host's own addresses\n", nil},
		{"redirect to a denied host", "curl -sL http://up.test/redirect", "jaild egress: denied.test:80 is not in the egress allowlist\n",
			func(u box.EgressUsage) bool { return u.Connections == 1 && u.Denied == 1 }},
		{"no resolver", py("import socket\nfor n in (\"up.test\", \"example.com\", \"localhost.\"+\"x\"):\n  try: socket.getaddrinfo(n, 80); print(\"resolved\", n)\n  except socket.gaierror: print(\"no\")"), "no\nno\nno\n", nil},
		{"no direct tcp", "curl -sS --noproxy '*' --max-time 5 http://" + upstreamIP + "/ 2>&1; echo exit $?", "exit 7\n", nil},
		{"no udp", py("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry: s.sendto(b\"q\", (\"" + upstreamIP + "\", 53)); print(\"sent\")\nexcept OSError as e: print(e.strerror)"), "Network is unreachable\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", tt.cmd}, Timeout: 30 * time.Second}}
			spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage {
				return p.Serve(ctx, ln, egress.Grant{Caller: t.Name()})
			}}
			res, err := m.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(res.Stdout, tt.want) {
				t.Errorf("stdout %q, want it to end with %q (stderr %q)", res.Stdout, tt.want, res.Stderr)
			}
			if res.Egress == nil {
				t.Fatal("no egress usage in the result")
			}
			if tt.usage != nil && !tt.usage(*res.Egress) {
				t.Errorf("usage %+v", *res.Egress)
			}
		})
	}
	for _, n := range resolver.asked {
		if n == "other.test" || n == "denied.test" || n == "example.com" {
			t.Errorf("refused name %s was looked up", n)
		}
	}
	// Nothing reached the upstream's port 53; a packet from the host does,
	// so the counter would have seen one.
	if n := up.UDPPackets(); n != 0 {
		t.Errorf("%d UDP packets reached the upstream from sandboxes", n)
	}
	if err := testenv.SendUDP(context.Background(), upstreamIP+":53"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); up.UDPPackets() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if up.UDPPackets() != 1 {
		t.Errorf("the upstream counted %d packets from the host, want 1", up.UDPPackets())
	}
}

// BenchmarkRunEgress compares whole runs of `true` with and without egress
// (the namespace made by jaild, the listener, the proxy served and
// stopped), interleaved so that both see the same load, and reports each
// one's median and the difference of the medians.
func BenchmarkRunEgress(b *testing.B) {
	testenv.NeedRoot(b, "sandboxes need namespaces and cgroups")
	env := testenv.New(b, "jaild-egress")
	m, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	p := egress.New(egress.Config{})
	plain := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
	withEgress := &jail.Spec{Command: box.Command{Args: []string{"true"}}, Egress: &jail.Egress{
		Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage { return p.Serve(ctx, ln, egress.Grant{}) },
	}}
	var without, with []time.Duration
	timed := func(spec *jail.Spec) time.Duration {
		start := time.Now()
		if _, err := m.Run(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for b.Loop() {
		without = append(without, timed(plain))
		with = append(with, timed(withEgress))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	mw, me := median(without), median(with)
	b.ReportMetric(mw, "ms-p50-without")
	b.ReportMetric(me, "ms-p50-egress")
	b.ReportMetric(me-mw, "ms-p50-added")
}
