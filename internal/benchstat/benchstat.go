// Package benchstat holds what jaild's load generators (scripts/loadgen,
// scripts/sessionbench) share: percentiles of latencies in milliseconds,
// and the check that they only ever load the local host.
package benchstat

import (
	"fmt"
	"net"
	"net/url"
	"time"
)

// Percentile is the nearest-rank p-th percentile (0 < p <= 1) of sorted
// samples, which must not be empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// CheckLoopback refuses a URL whose host is not, or does not resolve only
// to, loopback addresses: the generators load the local daemon, nothing
// else. prog names the program in the error.
func CheckLoopback(prog, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	host := u.Hostname()
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		if ips, err = net.LookupIP(host); err != nil || len(ips) == 0 {
			return fmt.Errorf("-url %s: cannot resolve %q", raw, host)
		}
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("-url %s: %s is not a loopback address; %s only loads the local host", raw, ip, prog)
		}
	}
	return nil
}
