package session

import (
	"context"
	"net"
	"sync"

	"github.com/jaild/jaild/box"
)

// Egress is a session's way out: a proxy served on its workspace's proxy
// listener (jail.WithProxy) for the session's whole life, so that every
// call and job of the session reaches what the session was granted, and
// nothing else. *egress.Serving is one.
type Egress interface {
	// Serve serves the proxy on ln until ctx ends, then closes ln and
	// every connection, and returns the final counters.
	Serve(ctx context.Context, ln net.Listener) box.EgressUsage
	// Usage is what the proxy counted so far.
	Usage() box.EgressUsage
}

// proxyServer serves a session's Egress in a goroutine of its own, which
// stop ends and joins.
type proxyServer struct {
	eg     Egress
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func serveProxy(eg Egress, ln net.Listener) *proxyServer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxyServer{eg: eg, cancel: cancel}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		eg.Serve(ctx, ln)
		_ = ln.Close() // in case Serve did not
	}()
	return p
}

// stop ends the proxy and waits for it; safe on nil.
func (p *proxyServer) stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
}

// usage is the proxy's counters so far; nil on nil.
func (p *proxyServer) usage() *box.EgressUsage {
	if p == nil {
		return nil
	}
	u := p.eg.Usage()
	return &u
}
