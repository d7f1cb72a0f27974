package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Upstream is a test host in a network namespace of its own, reached from
// the host's namespace through a veth pair: an HTTP server on port 80, an
// HTTPS server (self-signed) on 443 and a UDP listener on 53 that counts
// the packets it gets. Its address is in 198.18.0.0/15 (benchmarking, RFC
// 2544): never routed on the internet, and not one of the ranges the egress
// proxy refuses by default, so that a test can allow it by name.
type Upstream struct {
	Addr     netip.Addr // the upstream's address
	HostAddr netip.Addr // the host's end of the veth pair
	NetNS    string     // the namespace's name (ip netns)
	udp      atomic.Int64
}

// UDPPackets is how many packets reached the upstream's UDP port 53.
func (u *Upstream) UDPPackets() int64 { return u.udp.Load() }

// NewUpstream creates the namespace, the veth pair and the servers, which
// serve h, and removes them all at cleanup.
func NewUpstream(t testing.TB, h http.Handler) *Upstream {
	t.Helper()
	NeedRoot(t, "a test upstream needs a network namespace and a veth pair")
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	// A /30 in 198.19.0.0/16 picked at random: tests of several runs
	// may exist at once.
	n := int(b[0])<<8 | int(b[1])&0xfc
	host := netip.AddrFrom4([4]byte{198, 19, byte(n >> 8), byte(n&0xff) + 1})
	up := host.Next()
	u := &Upstream{Addr: up, HostAddr: host, NetNS: "jaild-up-" + id}
	hostIf, upIf := "jvh"+id, "jvu"+id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", u.NetNS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", u.NetNS).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", upIf, "netns", u.NetNS)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	ip("addr", "add", host.String()+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", u.NetNS, "addr", "add", up.String()+"/30", "dev", upIf)
	ip("-n", u.NetNS, "link", "set", upIf, "up")
	ip("-n", u.NetNS, "link", "set", "lo", "up")

	var lns [2]net.Listener
	var pc net.PacketConn
	err := InNetNS("/run/netns/"+u.NetNS, func() error {
		var err error
		if lns[0], err = net.Listen("tcp4", up.String()+":80"); err != nil {
			return err
		}
		if lns[1], err = net.Listen("tcp4", up.String()+":443"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", up.String()+":53")
		return err
	})
	if err != nil {
		t.Fatalf("upstream listeners: %v", err)
	}
	plain := &httptest.Server{Listener: lns[0], Config: &http.Server{Handler: h}}
	plain.Start()
	t.Cleanup(plain.Close)
	secure := &httptest.Server{Listener: lns[1], Config: &http.Server{Handler: h}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			u.udp.Add(1)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return u
}

// InNetNS runs fn on a thread that has joined the network namespace at
// path; sockets fn creates belong to that namespace for their life. The
// thread is never given back to the scheduler.
func InNetNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		errc <- func() error {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns %s: %w", path, err)
			}
			return fn()
		}()
	}()
	return <-errc
}

// SendUDP sends one packet from the host to addr, to prove that a packet
// counter works.
func SendUDP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte("probe"))
	return err
}
