package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// refused are the ranges no connection goes to unless the operator names
// the address itself: the host and its neighbours, never the internet.
var refused = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved and broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	// Tunnels that embed an IPv4 address a relay would reach for us.
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// refusedWhy says why ip is refused, or "" if it is not. IPv4-mapped and
// NAT64 forms of an IPv4 address are judged as that address.
func refusedWhy(ip netip.Addr, own *ownAddrs) string {
	ip = ip.Unmap()
	if ip.Is6() {
		if p := netip.MustParsePrefix("64:ff9b::/96"); p.Contains(ip) {
			b := ip.As16()
			ip = netip.AddrFrom4([4]byte(b[12:]))
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(ip) {
			return r.why
		}
	}
	if own != nil && own.has(ip) {
		return "one of the host's own addresses"
	}
	return ""
}

// ownAddrs are the host's addresses, read again at most every few seconds:
// a sandbox must not reach a service of the host through a public address
// the host holds.
type ownAddrs struct {
	mu    sync.Mutex
	read  time.Time
	addrs map[netip.Addr]bool
}

func (o *ownAddrs) has(ip netip.Addr) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.addrs == nil || time.Since(o.read) > 5*time.Second {
		o.addrs = map[netip.Addr]bool{}
		o.read = time.Now()
		// jaild runs in the host's network namespace: these are its
		// interfaces.
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						o.addrs[ip.Unmap()] = true
					}
				}
			}
		}
	}
	return o.addrs[ip]
}
