package jail_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// greeter is a stand-in proxy: it answers every connection with a line and
// counts them, and it checks the Serve contract (ctx ends, then it closes
// everything and returns).
type greeter struct {
	conns atomic.Int64
	ended atomic.Bool
}

func (g *greeter) serve(ctx context.Context, ln net.Listener) box.EgressUsage {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		g.conns.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			fmt.Fprintf(c, "from outside %s\n", c.LocalAddr())
		}()
	}
	wg.Wait()
	g.ended.Store(ctx.Err() != nil)
	return box.EgressUsage{Connections: g.conns.Load()}
}

// TestEgressListener: a sandbox given egress reaches the caller's listener
// on 127.0.0.1:ProxyPort, finds the proxy in its environment, and still has
// only loopback, which its root cannot change; the counters come back in
// the result, and the namespace and its pin are gone after (testenv's
// check).
func TestEgressListener(t *testing.T) {
	m := newManager(t)
	g := &greeter{}
	spec := sh(`
echo "$HTTPS_PROXY $NO_PROXY"
for i in 1 2; do python3 -c 'import socket; s = socket.create_connection(("127.0.0.1", 3128)); print(s.makefile().readline().strip())'; done
tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
wc -l < /proc/net/route
ip link add dummy0 type dummy 2>/dev/null || echo refused
getent hosts example.com || echo no-resolver`)
	spec.Egress = &jail.Egress{Serve: g.serve}
	res := run(t, m, spec)
	want := "http://127.0.0.1:3128 localhost,127.0.0.1,::1\nfrom outside 127.0.0.1:3128\nfrom outside 127.0.0.1:3128\nlo\n1\nrefused\nno-resolver\n"
	if res.Stdout != want || res.ExitCode != 0 {
		t.Fatalf("got exit %d, stdout %q, stderr %q; want stdout %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	if res.Egress == nil || res.Egress.Connections != 2 {
		t.Errorf("egress usage %+v, want 2 connections", res.Egress)
	}
	if !g.ended.Load() {
		t.Error("Serve returned before its ctx ended")
	}
	// Without egress: no listener, no proxy variables, no result field.
	res = run(t, m, sh(`echo "[$HTTP_PROXY]"; python3 -c 'import socket; socket.create_connection(("127.0.0.1", 3128))' 2>/dev/null || echo refused`))
	if res.Stdout != "[]\nrefused\n" || res.Egress != nil {
		t.Errorf("sandbox without egress: %q, %+v", res.Stdout, res.Egress)
	}
}

// TestEgressInvalid: egress needs a proxy, and is not served on a workspace.
func TestEgressInvalid(t *testing.T) {
	m := newManager(t)
	ws, err := m.NewWorkspace(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	g := &greeter{}
	for name, spec := range map[string]*jail.Spec{
		"no serve":  {Egress: &jail.Egress{}, Command: box.Command{Args: []string{"true"}}},
		"workspace": {Egress: &jail.Egress{Serve: g.serve}, Workspace: ws, Command: box.Command{Args: []string{"true"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := m.Run(context.Background(), spec)
			if ie := (*box.InvalidError)(nil); err == nil || !strings.Contains(err.Error(), "egress") {
				t.Fatalf("err = %v (%T), want an invalid egress", err, ie)
			}
		})
	}
}

// TestEgressCrashSweep: a jaild that dies with a sandbox given egress
// leaves its namespace pin to the next sweep.
func TestEgressCrashSweep(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	t.Setenv("JAILD_TEST_EGRESS", "1")
	owner := testenv.StartHelper(t, env, "helper-run")
	if n := len(testenv.MountsUnder(env.StateDir)); n != 1 {
		t.Fatalf("want the egress netns pinned, got %v", testenv.MountsUnder(env.StateDir))
	}
	testenv.KillWithWatchdog(t, env, owner)
	m, err := jail.New(config(env))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	// testenv's check at cleanup: no mount, no netns entry left.
}

// egressIfAsked gives the helper's sandbox egress when the test says so.
func egressIfAsked(spec *jail.Spec) {
	if os.Getenv("JAILD_TEST_EGRESS") == "" {
		return
	}
	spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage {
		<-ctx.Done()
		ln.Close()
		return box.EgressUsage{}
	}}
}

// TestEgressWatchdogSweep: the owner alone dies; its watchdog removes the
// sandbox and its namespace pin.
func TestEgressWatchdogSweep(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	t.Setenv("JAILD_TEST_EGRESS", "1")
	owner := testenv.StartHelper(t, env, "helper-run")
	if n := len(testenv.MountsUnder(env.StateDir)); n != 1 {
		t.Fatalf("want the egress netns pinned, got %v", testenv.MountsUnder(env.StateDir))
	}
	_ = owner.Process.Signal(syscall.SIGKILL)
	_ = owner.Wait()
	waitFor(t, 20*time.Second, "the watchdog to sweep and exit", func() bool { return len(testenv.Watchdogs(env.StateDir)) == 0 })
	// testenv's check at cleanup: no mount, no netns entry, nothing left.
}

// TestSweepPins: a pin no slot record names (an older jaild swept its
// sandbox without knowing of it) is removed by the next sweep; a live
// workspace's network namespace, which has no pin, is left alone.
func TestSweepPins(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	env := testenv.New(t, "jaild-test")
	m, err := jail.New(jail.Config{StateDir: env.StateDir, CgroupParent: env.Parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ws, err := m.NewWorkspace(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	orphan := jail.EgressNetNS(m, "00000000-0000-0000-0000-000000000000")
	if err := os.MkdirAll(filepath.Dir(orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := jail.NewEgressNetNS(orphan)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := m.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphan pin still there: %v", err)
	}
	res, err := ws.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"true"}}})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("the live workspace no longer runs: %v, %+v", err, res)
	}
}
