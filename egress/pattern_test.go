package egress

import (
	"net/netip"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		host    string
		port    int
		want    bool
	}{
		{"api.example.com:443", "api.example.com", 443, true},
		{"api.example.com:443", "api.example.com", 80, false},
		{"API.Example.com.:443", "api.example.com", 443, true},
		{"api.example.com:443", "x.api.example.com", 443, false},
		{"*.pypi.org:443", "files.pypi.org", 443, true},
		{"*.pypi.org:443", "a.b.pypi.org", 443, true},
		{"*.pypi.org:443", "pypi.org", 443, false},
		{"*.pypi.org:443", "evilpypi.org", 443, false},
		{"example.com:*", "example.com", 8080, true},
		{"10.1.2.3:443", "10.1.2.3", 443, true},
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.host, func(t *testing.T) {
			p, err := ParsePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Match(tt.host, tt.port); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParsePatternErrors(t *testing.T) {
	for _, s := range []string{"", "example.com", ":443", "example.com:0", "example.com:70000", "a*.b:443", "*.*.b:443", "ex ample.com:443", "$(id).x:443", "a..b:443", "2001:db8::1:443"} {
		if _, err := ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) succeeded", s)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		op, req string
		want    bool
	}{
		{"*.pypi.org:443", "files.pypi.org:443", true},
		{"*.pypi.org:443", "*.x.pypi.org:443", true},
		{"*.pypi.org:443", "*.pypi.org:443", true},
		{"*.pypi.org:443", "pypi.org:443", false},
		{"*.pypi.org:443", "files.pypi.org:*", false},
		{"a.com:*", "a.com:443", true},
		{"a.com:443", "b.com:443", false},
	}
	for _, tt := range tests {
		op, _ := ParsePattern(tt.op)
		req, _ := ParsePattern(tt.req)
		if got := op.Covers(req); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", tt.op, tt.req, got, tt.want)
		}
	}
}

func TestRefused(t *testing.T) {
	for _, s := range []string{
		"127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
		"0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "fe80::1", "fd00::1", "::", "ff02::1",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a00:1::1", "2001:0:a00:1::1",
	} {
		if refusedWhy(netip.MustParseAddr(s), nil) == "" {
			t.Errorf("%s is not refused", s)
		}
	}
	for _, s := range []string{"198.18.0.1", "8.8.8.8", "2606:4700::1"} {
		if why := refusedWhy(netip.MustParseAddr(s), nil); why != "" {
			t.Errorf("%s is refused: %s", s, why)
		}
	}
}
