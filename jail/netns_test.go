package jail_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// netnsProbe listens on 127.0.0.1:8123 and on an abstract unix socket,
// checks that it reaches both itself, prints its network namespace and
// whether it reached a listener of another sandbox on each, then keeps
// them open for a while.
const netnsProbe = `
import os, socket, sys, time
print(os.readlink("/proc/self/ns/net"))
def reach(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        return "reached"
    except OSError:
        return "refused"
    finally:
        s.close()
other = [reach(socket.AF_INET, ("127.0.0.1", 8123)), reach(socket.AF_UNIX, "\0jaild-netns-test")]
tcp = socket.socket(); tcp.bind(("127.0.0.1", 8123)); tcp.listen()
unix = socket.socket(socket.AF_UNIX); unix.bind("\0jaild-netns-test"); unix.listen()
print("own", reach(socket.AF_INET, ("127.0.0.1", 8123)), reach(socket.AF_UNIX, "\0jaild-netns-test"))
print("other", *other)
sys.stdout.flush()
time.sleep(float(sys.argv[1]))
`

// TestOwnNetworkNamespace: two sandboxes of their own that run at once each
// have a network namespace of its own (made by jaild, see newNetNS), not
// the host's: neither reaches a listener of the other on loopback, by TCP
// or by an abstract unix socket, where each reaches its own.
func TestOwnNetworkNamespace(t *testing.T) {
	m := newManager(t)
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		res, err := m.Run(context.Background(), pySpec(netnsProbe, "3"))
		if err != nil {
			first <- err.Error()
			return
		}
		first <- string(res.Stdout) + string(res.Stderr)
	}()
	// The first one listens within this second, unless the machine is
	// very slow; the namespaces' names are compared whatever the timing.
	time.Sleep(time.Second)
	res := run(t, m, pySpec(netnsProbe, "0"))
	second := string(res.Stdout) + string(res.Stderr)
	firstOut := <-first
	for _, out := range []string{firstOut, second} {
		if !strings.Contains(out, "own reached reached\nother refused refused\n") {
			t.Errorf("a sandbox shows %q; want its own listeners reached and none of another's", out)
		}
	}
	a, _, _ := strings.Cut(firstOut, "\n")
	b, _, _ := strings.Cut(second, "\n")
	if !strings.HasPrefix(a, "net:[") || a == b || a == host || b == host {
		t.Errorf("network namespaces: %q and %q, the host's %q; want two of their own", a, b, host)
	}
}

// pySpec runs the python program prog with the arguments args.
func pySpec(prog string, args ...string) *jail.Spec {
	return &jail.Spec{Command: box.Command{Args: append([]string{"/usr/bin/python3", "-c", prog}, args...)}}
}
