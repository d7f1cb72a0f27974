package server_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/server"
)

// TestSlowBodiesDoNotLockOut: a full server of connections that each
// trickle a request body, from several peers each within its cap, still
// answers a fresh peer long before the body timeout; and the trickling
// requests are cut with a 408 that says why.
func TestSlowBodiesDoNotLockOut(t *testing.T) {
	const peers = 4
	perPeer := server.DefaultMaxConnsPerPeer
	ts := start(t, server.Options{}) // the defaults: 256 connections, 64 per peer
	if peers*perPeer != server.DefaultMaxConns {
		t.Fatalf("the test fills %d places, the server has %d", peers*perPeer, server.DefaultMaxConns)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	var conns []*rawConn
	for p := 0; p < peers; p++ {
		from := fmt.Sprintf("127.0.0.%d", 2+p)
		for i := 0; i < perPeer; i++ {
			c := dialFrom(t, "tcp", ts.Addr, from)
			head := "POST /run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() { // a byte every half second, until the server cuts it
				defer wg.Done()
				tick := time.NewTicker(500 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						c.SetWriteDeadline(time.Now().Add(time.Second))
						if _, err := io.WriteString(c, " "); err != nil {
							return
						}
					}
				}
			}()
		}
	}

	// The body timeout is 30s; a fresh peer must not wait for it.
	const within = 15 * time.Second
	fresh := dialFrom(t, "tcp", ts.Addr, "127.0.0.200")
	start := time.Now()
	req := fresh.send(t, "GET", "/healthz", "", "")
	resp, body := fresh.recv(t, req, within)
	if resp.StatusCode != 200 {
		t.Errorf("fresh peer's /healthz: %d %s", resp.StatusCode, body)
	}
	t.Logf("fresh peer answered after %v", time.Since(start).Round(time.Millisecond))

	// Every trickling request is answered 408, saying why, before its
	// body timeout.
	reasons := map[string]int{}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Errorf("trickling connection %d: no answer: %v", i, err)
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// And the connection is closed, not kept while net/http reads
		// the rest of the body at the client's pace.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("trickling connection %d: still open after its 408 (%v)", i, err)
		}
		switch {
		case resp.StatusCode != http.StatusRequestTimeout:
			t.Errorf("trickling connection %d: %d %s, want 408", i, resp.StatusCode, data)
		case strings.Contains(string(data), "slower than"):
			reasons["too slow"]++
		case strings.Contains(string(data), "server is full"):
			reasons["taken for another peer"]++
		default:
			t.Errorf("trickling connection %d: 408 %s, want a reason", i, data)
		}
	}
	t.Logf("trickling requests cut: %v", reasons)
	if reasons["taken for another peer"] < 1 {
		t.Errorf("no trickling connection made room for the fresh peer: %v", reasons)
	}
}
