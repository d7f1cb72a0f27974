package run

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
)

// TestGrant: the one decision runs and sessions share.
func TestGrant(t *testing.T) {
	pats := func(s ...string) []egress.Pattern {
		p, err := egress.ParsePatterns(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	proxy := egress.New(egress.Config{Allow: pats("*.pypi.org:443")})
	tokens := map[string][]egress.Pattern{"ci": pats("api.github.com:443")}
	tests := []struct {
		name      string
		o         EgressOptions
		caller    string
		want      *api.Egress
		wantBase  []string // nil: the daemon's list
		wantHosts []string // nil: not narrowed
		wantNone  bool
		wantErr   string
	}{
		{name: "no field, default off", o: EgressOptions{Proxy: proxy}, wantNone: true},
		{name: "no field, default on", o: EgressOptions{Proxy: proxy, Default: true}},
		{name: "false beats the default", o: EgressOptions{Proxy: proxy, Default: true}, want: &api.Egress{}, wantNone: true},
		{name: "true", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true}},
		{name: "narrowing", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true, Hosts: []string{"files.pypi.org:443"}}, wantHosts: []string{"files.pypi.org:443"}},
		{name: "widening", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true, Hosts: []string{"evil.test:443"}}, wantErr: "not within"},
		{name: "token's list", o: EgressOptions{Proxy: proxy, Tokens: tokens}, caller: "ci", want: &api.Egress{Allowed: true}, wantBase: []string{"api.github.com:443"}},
		{name: "no proxy", o: EgressOptions{}, want: &api.Egress{Allowed: true}, wantErr: "gives no network access"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := tt.o.Grant(tt.want, tt.caller)
			var ie *box.InvalidError
			switch {
			case tt.wantErr != "":
				if !errors.As(err, &ie) || ie.Field != "egress" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want an invalid egress saying %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tt.wantNone:
				if g != nil {
					t.Fatalf("grant %+v, want none", g)
				}
				return
			case g == nil:
				t.Fatal("no grant")
			}
			str := func(ps []egress.Pattern) []string {
				if ps == nil {
					return nil
				}
				out := []string{}
				for _, p := range ps {
					out = append(out, p.String())
				}
				return out
			}
			if got := str(g.Base); !slices.Equal(got, tt.wantBase) || (got == nil) != (tt.wantBase == nil) {
				t.Errorf("base %q, want %q", got, tt.wantBase)
			}
			if got := str(g.Hosts); !slices.Equal(got, tt.wantHosts) || (got == nil) != (tt.wantHosts == nil) {
				t.Errorf("hosts %q, want %q", got, tt.wantHosts)
			}
			if g.Caller != tt.caller {
				t.Errorf("caller %q, want %q", g.Caller, tt.caller)
			}
		})
	}
}

// TestSessionEgress: a session's proxy carries the session's id in its
// grant (seen by the audit log), and none is made for a session without
// egress.
func TestSessionEgress(t *testing.T) {
	allow, err := egress.ParsePatterns([]string{"up.test:80"})
	if err != nil {
		t.Fatal(err)
	}
	var got []egress.Decision
	o := EgressOptions{Proxy: egress.New(egress.Config{Allow: allow, OnDecision: func(d egress.Decision) { got = append(got, d) }})}
	if f, err := SessionEgress(o, nil, nil, "alice", "sessions"); f != nil || err != nil {
		t.Fatalf("no field: %v, %v; want no egress", f != nil, err)
	}
	if _, err := SessionEgress(EgressOptions{}, nil, &api.Egress{Allowed: true}, "alice", "sessions"); !box.IsInvalid(err) {
		t.Fatalf("egress without a proxy: %v, want invalid", err)
	}
	f, err := SessionEgress(o, NewMetrics(), &api.Egress{Allowed: true}, "alice", "sessions")
	if err != nil || f == nil {
		t.Fatalf("SessionEgress: %v", err)
	}
	eg := f("s-1")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan box.EgressUsage, 1)
	go func() { done <- eg.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	if !strings.Contains(string(buf[:n]), "403") {
		t.Fatalf("answer %q, want 403", buf[:n])
	}
	if u := eg.Usage(); u.Denied != 1 || u.Connections != 0 {
		t.Errorf("usage %+v, want one denied", u)
	}
	cancel()
	if u := <-done; u.Denied != 1 {
		t.Errorf("final usage %+v, want one denied", u)
	}
	done <- box.EgressUsage{} // for the cleanup
	if len(got) != 1 || got[0].Grant.SessionID != "s-1" || got[0].Grant.Caller != "alice" || got[0].Grant.FrontEnd != "sessions" {
		t.Errorf("decisions %+v, want one with the session's grant", got)
	}
}
