package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// A Pattern is one entry of an allowlist, written "host:port": host is a
// name ("api.example.com"), a wildcard ("*.pypi.org": any name below
// pypi.org, not pypi.org itself) or an IP address ("10.1.2.3",
// "[2001:db8::1]"); port is a number or "*". Names match without regard to
// case or a trailing dot.
type Pattern struct {
	host string     // lower case, no trailing dot; "*.x" for a wildcard
	ip   netip.Addr // valid for an IP pattern
	port int        // 0 for any
}

// ParsePattern parses "host:port".
func ParsePattern(s string) (Pattern, error) {
	h, p, ok := cutHostPort(strings.TrimSpace(s))
	if !ok || h == "" || p == "" {
		return Pattern{}, fmt.Errorf("egress pattern %q: want host:port, e.g. api.example.com:443 or *.pypi.org:443", s)
	}
	var pat Pattern
	if p != "*" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Pattern{}, fmt.Errorf("egress pattern %q: port must be 1-65535 or *", s)
		}
		pat.port = n
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		pat.ip, pat.host = ip.Unmap(), ip.Unmap().String()
		return pat, nil
	}
	name := strings.TrimSuffix(strings.ToLower(h), ".")
	check := strings.TrimPrefix(name, "*.")
	if strings.Contains(check, "*") || !validName(check) {
		return Pattern{}, fmt.Errorf("egress pattern %q: %q is not a host name, *.name or IP address", s, h)
	}
	pat.host = name
	return pat, nil
}

// ParsePatterns parses a list of patterns, each item possibly holding
// several separated by commas (as JAILD_EGRESS_ALLOW does).
func ParsePatterns(items []string) ([]Pattern, error) {
	var out []Pattern
	for _, item := range items {
		for _, s := range strings.Split(item, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			p, err := ParsePattern(s)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// String gives the pattern back as "host:port".
func (p Pattern) String() string {
	port := "*"
	if p.port != 0 {
		port = strconv.Itoa(p.port)
	}
	if p.ip.Is6() {
		return "[" + p.host + "]:" + port
	}
	return p.host + ":" + port
}

// Match reports whether host (normalised: lower case, no trailing dot; an
// IP address as netip prints it) and port are allowed by p.
func (p Pattern) Match(host string, port int) bool {
	if p.port != 0 && p.port != port {
		return false
	}
	if suffix, ok := strings.CutPrefix(p.host, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return p.host == host
}

// Covers reports whether every host:port q matches is also matched by p:
// a request's list may only narrow the operator's.
func (p Pattern) Covers(q Pattern) bool {
	if p.port != 0 && p.port != q.port {
		return false
	}
	if p.host == q.host {
		return true
	}
	suffix, ok := strings.CutPrefix(p.host, "*")
	return ok && strings.HasSuffix(q.host, suffix) && len(q.host) > len(suffix)
}

// matchAny reports whether any of pats matches.
func matchAny(pats []Pattern, host string, port int) bool {
	for _, p := range pats {
		if p.Match(host, port) {
			return true
		}
	}
	return false
}

// namesIP reports whether some pattern names ip itself (with port): an
// operator who wrote "10.1.2.3:443" means that address, private or not.
func namesIP(pats []Pattern, ip netip.Addr, port int) bool {
	for _, p := range pats {
		if p.ip.IsValid() && p.ip == ip && (p.port == 0 || p.port == port) {
			return true
		}
	}
	return false
}

// cutHostPort splits "host:port" and "[v6]:port".
func cutHostPort(s string) (host, port string, ok bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 || !strings.HasPrefix(s[end+1:], ":") {
			return "", "", false
		}
		return s[1:end], s[end+2:], true
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Contains(s[:i], ":") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// validName reports whether s is a DNS name jaild will look up: labels of
// letters, digits, hyphens and underscores, 1-63 bytes each, 253 in all.
// Anything else (spaces, shell characters, empty labels) is refused before
// any lookup.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// normalize turns a request's host into the form patterns match: an IP
// address as netip prints it, a name in lower case without a trailing dot.
// ok is false for anything that is neither.
func normalize(host string) (name string, ip netip.Addr, ok bool) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, false
		}
		a = a.Unmap()
		return a.String(), a, true
	}
	name = strings.TrimSuffix(strings.ToLower(host), ".")
	return name, netip.Addr{}, validName(name)
}
