package main

import (
	"crypto/tls"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/route"
)

// fleetFlags run jaild serve as one daemon of many behind a load balancer
// (see docs/fleet.md and package route).
var fleetFlags = []cli.Flag{
	&cli.StringFlag{Name: "fleet-key", EnvVars: []string{"JAILD_FLEET_KEY"}, Usage: "file holding the fleet's shared secret (at least 32 bytes, not accessible to other users): session ids name their daemon, and every daemon forwards a session's requests to it; needs --advertise-addr"},
	&cli.StringSliceFlag{Name: "fleet-key-accept", EnvVars: []string{"JAILD_FLEET_KEY_ACCEPT"}, Usage: "file of another fleet key under which session ids and forwarded requests are accepted, never signed: a key rotation's next or previous key (repeatable or comma-separated; checked as --fleet-key is; see docs/fleet.md, \"Rotating the fleet key\")"},
	&cli.DurationFlag{Name: "fleet-key-reload", Value: defaultFleetKeyReload, EnvVars: []string{"JAILD_FLEET_KEY_RELOAD"}, Usage: "how often the --fleet-key and --fleet-key-accept files are checked for a change, loaded without a restart so that a rotation keeps the daemon's sessions; a change that fails to load keeps the keys in use (0: never)"},
	&cli.StringFlag{Name: "advertise-addr", EnvVars: []string{"JAILD_ADVERTISE_ADDR"}, Usage: "IP:PORT at which the fleet's other daemons reach this one (in Kubernetes: the pod IP and the port)"},
	&cli.StringSliceFlag{Name: "peer-cidr", EnvVars: []string{"JAILD_PEER_CIDRS"}, Usage: "network (CIDR) the fleet's daemons are in; requests are forwarded only there (repeatable; default: wherever a valid session id names)"},
	&cli.StringFlag{Name: "peer-ca", EnvVars: []string{"JAILD_PEER_CA"}, Usage: "PEM file of the CA that signed the peers' certificates, when the daemon serves TLS (default: the system's)"},
	&cli.StringFlag{Name: "peer-tls-name", EnvVars: []string{"JAILD_PEER_TLS_NAME"}, Usage: "name the peers' certificates carry (default: the peer's IP address must be in its certificate)"},
	&cli.StringSliceFlag{Name: "peers", EnvVars: []string{"JAILD_PEERS"}, Usage: "HOST:PORT of another daemon of the fleet (repeatable): new sessions, runs and MCP sessions go to the least-loaded ready daemon"},
	&cli.StringSliceFlag{Name: "peers-dns", EnvVars: []string{"JAILD_PEERS_DNS"}, Usage: "NAME:PORT whose name resolves to every daemon of the fleet (in Kubernetes: the headless <release>-peers Service), resolved again every poll; as --peers"},
	&cli.StringSliceFlag{Name: "trusted-proxy", EnvVars: []string{"JAILD_TRUSTED_PROXIES"}, Usage: "network (CIDR) of load balancers whose X-Forwarded-For names the caller (repeatable); from other peers it is ignored"},
}

// defaultFleetKeyReload is --fleet-key-reload's default: a Kubernetes
// Secret's mounted files change up to a minute or so after the Secret, and
// a rotation's steps are minutes apart.
const defaultFleetKeyReload = 10 * time.Second

// fleetMember is a fleet daemon's router and the key files it reloads.
type fleetMember struct {
	router *route.Router
	keys   *fleetKeys
}

// fleetOptions reads the fleet flags: the fleet (nil without --fleet-key)
// and the trusted proxies.
func fleetOptions(c *cli.Context, maxBody int64, log *slog.Logger) (*fleetMember, []netip.Prefix, error) {
	trusted, err := prefixFlag(c, "trusted-proxy")
	if err != nil {
		return nil, nil, err
	}
	keyFile, adv := c.String("fleet-key"), c.String("advertise-addr")
	switch {
	case keyFile == "" && adv == "":
		for _, f := range []string{"fleet-key-accept", "peer-cidr", "peer-ca", "peer-tls-name", "peers", "peers-dns"} {
			if c.IsSet(f) {
				return nil, nil, command.UsageError("--%s needs --fleet-key", f)
			}
		}
		return nil, trusted, nil
	case keyFile == "" || adv == "":
		return nil, nil, command.UsageError("--fleet-key and --advertise-addr go together: give both or neither")
	case c.String("socket") != "":
		return nil, nil, command.UsageError("--fleet-key is for --listen: peers cannot reach a unix socket")
	case c.Duration("fleet-key-reload") < 0:
		return nil, nil, command.UsageError("--fleet-key-reload must not be negative")
	}
	keys, err := newFleetKeys(keyFile, c.StringSlice("fleet-key-accept"), log)
	if err != nil {
		return nil, nil, err
	}
	key, accept, err := keys.load()
	if err != nil {
		return nil, nil, command.UsageError("%v", err)
	}
	keys.every = c.Duration("fleet-key-reload")
	ap, err := netip.ParseAddrPort(adv)
	if err != nil {
		return nil, nil, command.UsageError("--advertise-addr %q: want IP:PORT: %v", adv, err)
	}
	peers, err := prefixFlag(c, "peer-cidr")
	if err != nil {
		return nil, nil, err
	}
	cfg := route.Config{Key: key, AcceptKeys: accept, Advertise: ap, PeerCIDRs: peers, MaxBodyBytes: maxBody, Logger: log.With("front", "route"),
		Peers: append(c.StringSlice("peers"), c.StringSlice("peers-dns")...)}
	if c.String("tls-cert") != "" {
		// The daemon serves TLS, and so do its peers: the forwarded
		// requests carry bearer tokens.
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: c.String("peer-tls-name")}
		if ca := c.String("peer-ca"); ca != "" {
			if cfg.TLS.RootCAs, err = client.ReadCAFile(ca); err != nil {
				return nil, nil, command.UsageError("--peer-ca: %v", err)
			}
		}
	} else if c.IsSet("peer-ca") || c.IsSet("peer-tls-name") {
		return nil, nil, command.UsageError("--peer-ca and --peer-tls-name need --tls-cert: peers are dialled over TLS when the daemon serves it")
	}
	rt, err := route.New(cfg)
	if err != nil {
		return nil, nil, command.UsageError("%v", err)
	}
	log.Info("in a fleet: session ids name this daemon", append([]any{"advertise", ap.String(), "instance", rt.Instance()}, keyAttrs(key, accept)...)...)
	return &fleetMember{router: rt, keys: keys}, trusted, nil
}

// prefixFlag parses a repeatable CIDR flag; a bare address is its /32 or
// /128.
func prefixFlag(c *cli.Context, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range c.StringSlice(name) {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return nil, command.UsageError("--%s %q: want a CIDR (10.0.0.0/8) or an address", name, s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}
