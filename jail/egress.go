package jail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/jaild/jaild/box"
)

// ProxyPort is the port of the proxy endpoint on the loopback of a sandbox
// given egress: 127.0.0.1:3128 (squid's port, which proxy-aware tools
// guess first).
const ProxyPort = 3128

// Egress gives a sandbox a way out through a proxy its caller serves, and no
// other: the sandbox's network namespace still has only loopback, no route
// and no resolver. jaild creates that namespace itself (owned by the host's
// user namespace, so that the sandbox's root cannot add an interface or a
// route to it) and, inside it, a TCP listener on 127.0.0.1:[ProxyPort],
// which it hands to Serve. The command gets HTTP_PROXY, HTTPS_PROXY,
// ALL_PROXY (and their lower-case forms) pointing at it and NO_PROXY for
// loopback; what the proxy lets through is the caller's business (package
// egress), not the jail's.
type Egress struct {
	// Serve serves the proxy on ln from outside the sandbox. It is called
	// in a goroutine of its own before the command starts. ctx ends once
	// the sandbox's processes are dead; Serve must then close ln and
	// every connection it accepted, and return. What it returns is the
	// run's Result.Egress. Required.
	Serve func(ctx context.Context, ln net.Listener) box.EgressUsage
}

// proxyEnv is what a sandbox with egress finds in its environment. The
// caller's Env still overrides it.
func proxyEnv() []string {
	url := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	return []string{
		"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "ALL_PROXY=" + url,
		"http_proxy=" + url, "https_proxy=" + url, "all_proxy=" + url,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// egressNetNS is the path a sandbox's egress network namespace is pinned
// at, derived from its record as a workspace's is (see workspacePaths), so
// that a sweep never acts on a path a record could name.
func egressNetNS(stateRoot, id string) string {
	return filepath.Join(filepath.Dir(stateRoot), "netns", id)
}

// newProxyNetNS creates a loopback-only network namespace (see newNetNS)
// and, in it, a TCP listener on 127.0.0.1:ProxyPort. A socket belongs to
// the namespace it was created in for its whole life, whichever thread
// later accepts on it, so the listener is created by the thread that
// entered the namespace, and served from anywhere after.
func newProxyNetNS() (*os.File, *net.TCPListener, error) {
	var ln *net.TCPListener
	ns, err := newNetNS(func() error {
		// net.ListenTCP makes its socket on the calling thread, which
		// is locked in the namespace.
		var err error
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ProxyPort})
		if err != nil {
			return fmt.Errorf("proxy listener: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return ns, ln, nil
}

// newEgressNetNS makes a sandbox's egress namespace with its proxy
// listener (see newProxyNetNS), pinned at path: a sandbox's record names
// the pin, so that its teardown and a sweep find it.
func newEgressNetNS(path string) (*net.TCPListener, error) {
	ns, ln, err := newProxyNetNS()
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if err := pinNetNS(ns, path); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// serveEgress starts e.Serve on ln and returns the function that, once the
// sandbox is gone, ends it and gives its usage.
func serveEgress(ctx context.Context, e *Egress, ln *net.TCPListener) (stop func() *box.EgressUsage) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		wg    sync.WaitGroup
		usage box.EgressUsage
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		usage = e.Serve(ctx, ln)
	}()
	return func() *box.EgressUsage {
		cancel()
		wg.Wait()
		_ = ln.Close() // in case Serve did not
		return &usage
	}
}

// validateEgress checks what a spec's Egress asks for.
func validateEgress(s *Spec) error {
	if s.Egress == nil {
		return nil
	}
	if s.Egress.Serve == nil {
		return invalid("egress", "no proxy to serve it")
	}
	if s.Workspace != nil {
		// A workspace's sandboxes share its network namespace: one
		// made WithProxy has a listener its caller serves for all of
		// them (a session's egress), none has one per sandbox.
		return invalid("egress", "not available on a workspace (make the workspace WithProxy)")
	}
	return nil
}

// sweepPins removes the network namespace pins under the state dir that no
// slot record names. A pin always has a record first (the record is
// written before the pin is made, and released only after it is removed),
// so a pin without one was left by a sweep that did not know of it: an
// older jaild on the same host sweeping a newer one's orphan. The pins are
// listed before the records are read, so that a pin made in between is not
// seen, and a record that cannot be read stops the sweep: when in doubt,
// nothing is removed.
func (m *Manager) sweepPins() (int, error) {
	dir := filepath.Join(m.stateDir, "netns")
	pins, err := os.ReadDir(dir)
	if err != nil || len(pins) == 0 {
		return 0, nil
	}
	slots, err := os.ReadDir(m.slotDir)
	if err != nil {
		return 0, nil
	}
	named := map[string]bool{}
	for _, s := range slots {
		if _, ok := slotNumber(s.Name()); !ok {
			continue // not a slot: the search hint
		}
		data, err := os.ReadFile(filepath.Join(m.slotDir, s.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, nil
		}
		if len(bytes.TrimSpace(data)) == 0 {
			continue // being written: its pin, if any, comes after
		}
		var rec record
		if json.Unmarshal(data, &rec) != nil {
			return 0, nil
		}
		named[rec.ID] = true
	}
	var (
		n    int
		errs []error
	)
	for _, p := range pins {
		if named[p.Name()] {
			continue
		}
		n++
		if err := removeNetNS(filepath.Join(dir, p.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
