package session_test

import (
	"bufio"
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/session"
)

// lineEgress answers each connection's first line; it stands for the
// egress proxy (package egress), which cmd/jaild's tests serve for real.
type lineEgress struct {
	id     string
	conns  atomic.Int64
	ended  atomic.Bool
	served chan struct{}
}

func (e *lineEgress) Serve(ctx context.Context, ln net.Listener) box.EgressUsage {
	defer e.ended.Store(true)
	close(e.served)
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return e.Usage()
		}
		e.conns.Add(1)
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Write([]byte(e.id + " got " + line))
		c.Close()
	}
}

func (e *lineEgress) Usage() box.EgressUsage { return box.EgressUsage{Connections: e.conns.Load()} }

// TestEgress: a session with Egress serves it on its workspace's listener
// for every call, with the proxy variables set, counts it in Info, and
// stops it (joined) when the session is removed; a session without has no
// listener.
func TestEgress(t *testing.T) {
	m, _ := newManagers(t)
	var eg *lineEgress
	s := create(t, m, session.Options{Owner: caller.FromToken("o"), Egress: func(id string) session.Egress {
		eg = &lineEgress{id: id, served: make(chan struct{})}
		return eg
	}})
	if eg == nil || eg.id != s.ID() {
		t.Fatalf("Egress made for %+v, want session %s", eg, s.ID())
	}
	<-eg.served
	for i := range 2 {
		res := shell(t, s, `bash -c 'echo "$HTTP_PROXY"; exec 3<>/dev/tcp/127.0.0.1/3128; echo hi >&3; cat <&3'`)
		if want := "http://127.0.0.1:3128\n" + s.ID() + " got hi\n"; res.Stdout != want {
			t.Errorf("call %d: %q, want %q", i, res.Stdout, want)
		}
	}
	if u := s.Info().Egress; u == nil || u.Connections != 2 {
		t.Errorf("Info().Egress = %+v, want 2 connections", u)
	}
	plain := create(t, m, session.Options{Owner: caller.FromToken("o")})
	if plain.Info().Egress != nil {
		t.Error("a session without egress has counters")
	}
	if res := shell(t, plain, `bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128' 2>/dev/null || echo refused; echo "[$HTTP_PROXY]"`); res.Stdout != "refused\n[]\n" {
		t.Errorf("session without egress: %q", res.Stdout)
	}
	if err := m.Delete(caller.FromToken("o"), s.ID()); err != nil {
		t.Fatal(err)
	}
	if !eg.ended.Load() {
		t.Error("the session's proxy still serves after Delete")
	}
}
