package egress

import (
	"net/netip"
	"strings"
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

// TestRefusedEmbedded: every IPv6 form of a refused IPv4 address is
// refused, and names the address; the same forms of a public address pass
// where the form itself is not refused.
func TestRefusedEmbedded(t *testing.T) {
	tests := []struct {
		name, addr string
		want       string // a part of the reason; "" for allowed
	}{
		{"compatible loopback", "::127.0.0.1", "127.0.0.1"},
		{"compatible loopback hex", "::7f00:1", "loopback"},
		{"compatible metadata", "::169.254.169.254", "link-local"},
		{"compatible private", "::10.1.2.3", "private"},
		{"compatible public", "::8.8.8.8", ""},
		{"mapped loopback", "::ffff:127.0.0.1", "loopback"},
		{"mapped private", "::ffff:192.168.0.1", "private"},
		{"mapped public", "::ffff:8.8.8.8", ""},
		{"translated loopback", "::ffff:0:7f00:1", "127.0.0.1"},
		{"translated loopback dotted", "::ffff:0:127.0.0.1", "loopback"},
		{"translated metadata", "::ffff:0:a9fe:a9fe", "link-local"},
		{"translated public", "::ffff:0:808:808", ""},
		{"nat64 loopback", "64:ff9b::127.0.0.1", "loopback"},
		{"nat64 metadata", "64:ff9b::a9fe:a9fe", "link-local"},
		{"nat64 cgnat", "64:ff9b::100.64.0.1", "carrier-grade NAT"},
		{"nat64 public", "64:ff9b::8.8.8.8", ""},
		{"nat64 local-use", "64:ff9b:1::7f00:1", "local-use NAT64"},
		{"nat64 local-use public", "64:ff9b:1::808:808", "local-use NAT64"},
		{"6to4 loopback", "2002:7f00:1::1", "127.0.0.1"},
		{"6to4 public", "2002:808:808::1", "6to4"},
		{"teredo loopback client", "2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"},
		{"teredo", "2001:0:4136:e378::1", "Teredo"},
		{"unspecified", "::", "unspecified"},
		{"loopback", "::1", "loopback"},
		{"zone", "::ffff:0:7f00:1%eth0", "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why := refusedWhy(netip.MustParseAddr(tt.addr), nil)
			switch {
			case tt.want == "" && why != "":
				t.Errorf("%s is refused: %s", tt.addr, why)
			case tt.want != "" && !strings.Contains(why, tt.want):
				t.Errorf("%s: reason %q, want one naming %q", tt.addr, why, tt.want)
			}
		})
	}
}
