package run

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/jail"
)

// specJail records the spec it is given.
type specJail struct{ got *jail.Spec }

func (s *specJail) Run(_ context.Context, spec *jail.Spec) (*box.Result, error) {
	s.got = spec
	return &box.Result{}, nil
}

func TestEgressLink(t *testing.T) {
	pats := func(s ...string) []egress.Pattern {
		p, err := egress.ParsePatterns(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	proxy := egress.New(egress.Config{Allow: pats("*.pypi.org:443")})
	empty := egress.New(egress.Config{})
	tokens := map[string][]egress.Pattern{"ci": pats("api.github.com:443")}
	tests := []struct {
		name       string
		o          EgressOptions
		caller     string
		session    string
		want       *api.Egress
		wantEgress bool
		wantErr    string
	}{
		{name: "no field, default off", o: EgressOptions{Proxy: proxy}},
		{name: "in a session", o: EgressOptions{Proxy: proxy}, session: "s1", want: &api.Egress{Allowed: true}, wantErr: "set when the session is created"},
		{name: "no field, default on", o: EgressOptions{Proxy: proxy, Default: true}, wantEgress: true},
		{name: "false", o: EgressOptions{Proxy: proxy, Default: true}, want: &api.Egress{}},
		{name: "true", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true}, wantEgress: true},
		{name: "narrowing list", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true, Hosts: []string{"files.pypi.org:443"}}, wantEgress: true},
		{name: "list beyond", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true, Hosts: []string{"evil.test:443"}}, wantErr: "not within the operator's allowlist"},
		{name: "bad pattern", o: EgressOptions{Proxy: proxy}, want: &api.Egress{Allowed: true, Hosts: []string{"$(id).x"}}, wantErr: "want host:port"},
		{name: "no proxy", o: EgressOptions{}, want: &api.Egress{Allowed: true}, wantErr: "gives no network access"},
		{name: "no proxy, default on is no egress", o: EgressOptions{Default: true}},
		{name: "empty list", o: EgressOptions{Proxy: empty}, want: &api.Egress{Allowed: true}, wantErr: "allowlist is empty"},
		{name: "token's own list", o: EgressOptions{Proxy: empty, Tokens: tokens}, caller: "ci", want: &api.Egress{Allowed: true}, wantEgress: true},
		{name: "token narrows its own list", o: EgressOptions{Proxy: proxy, Tokens: tokens}, caller: "ci", want: &api.Egress{Allowed: true, Hosts: []string{"files.pypi.org:443"}}, wantErr: "not within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := &specJail{}
			spec := &jail.Spec{Command: box.Command{Args: []string{"true"}}}
			req := Request{Spec: spec, Caller: tt.caller, Egress: tt.want, SessionID: tt.session}
			_, err := withEgress(baseRunner{base: base}, tt.o).Run(context.Background(), req)
			var ie *box.InvalidError
			switch {
			case tt.wantErr != "":
				if !errors.As(err, &ie) || ie.Field != "egress" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want an invalid egress saying %q", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if (base.got.Egress != nil) != tt.wantEgress {
				t.Errorf("egress given: %v, want %v", base.got.Egress != nil, tt.wantEgress)
			}
			if spec.Egress != nil || req.Spec != spec {
				t.Error("the caller's spec was changed")
			}
		})
	}
}
