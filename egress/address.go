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

// embedded4 are the IPv6 ranges whose addresses carry an IPv4 address in
// their last 32 bits, and so are judged as that address: whatever routes
// them (the kernel's SIT driver, a NAT64 gateway, a SIIT translator) may
// deliver the packet to the IPv4 address, refused or not.
var embedded4 = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},           // RFC 4291 2.5.5.1
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},       // RFC 4291 2.5.5.2
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated"}, // RFC 2765 2.1, RFC 6145
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},              // RFC 6052 2.1
}

// refusedWhy says why ip is refused, or "" if it is not. An IPv6 address
// that embeds an IPv4 address (see embedded4) is judged as that address;
// NAT64's local-use prefix, 6to4 and Teredo are refused whole, as relays
// and translators of the operator's network may reach any IPv4 address
// they embed, and name the address they embed in the reason.
func refusedWhy(ip netip.Addr, own *ownAddrs) string {
	ip = ip.WithZone("")
	for _, e := range embedded4 {
		if ip.Is6() && e.prefix.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback() {
			b := ip.As16()
			v4 := netip.AddrFrom4([4]byte(b[12:]))
			if why := refusedWhy(v4, own); why != "" {
				return e.name + " form of " + v4.String() + ", " + why
			}
			return ""
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(ip) {
			if v4, ok := tunnelled4(ip); ok {
				return r.why + " (embeds " + v4.String() + ")"
			}
			return r.why
		}
	}
	if own != nil && own.has(ip) {
		return "one of the host's own addresses"
	}
	return ""
}

// tunnelled4 returns the IPv4 address a 6to4 (RFC 3056: 2002:V4ADDR::/48)
// or Teredo (RFC 4380: the client's address, inverted, in the last 32 bits
// of 2001:0::/32) address embeds.
func tunnelled4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, false
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0:
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
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
