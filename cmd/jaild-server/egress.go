package main

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
)

// egressConfig reads the egress flags every command shares.
func egressConfig(c *cli.Context, log *slog.Logger) (egress.Config, error) {
	cfg := egress.Config{Logger: log}
	var err error
	if cfg.Allow, err = egress.ParsePatterns(c.StringSlice("egress-allow")); err != nil {
		return cfg, command.UsageError("--egress-allow: %v", err)
	}
	for _, s := range splitAll(c.StringSlice("egress-allow-cidr")) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return cfg, command.UsageError("--egress-allow-cidr %q: not an address range (10.1.2.0/24)", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		cfg.AllowCIDR = append(cfg.AllowCIDR, p.Masked())
	}
	if table, err := resolveTable(c.StringSlice("egress-resolve")); err != nil {
		return cfg, err
	} else if table != nil {
		cfg.Resolver = &egress.Hosts{Table: table, Next: net.DefaultResolver}
	}
	if cfg.MaxBytes, err = command.SizeFlag(c, "egress-max-bytes"); err != nil {
		return cfg, err
	}
	if cfg.MaxConns = c.Int64("egress-max-conns"); cfg.MaxConns < 0 {
		return cfg, command.UsageError("--egress-max-conns %d: must not be negative (0: no cap)", cfg.MaxConns)
	}
	return cfg, nil
}

// resolveTable parses NAME=IP entries.
func resolveTable(items []string) (map[string][]netip.Addr, error) {
	var table map[string][]netip.Addr
	for _, s := range splitAll(items) {
		name, ip, ok := strings.Cut(s, "=")
		a, err := netip.ParseAddr(ip)
		if !ok || err != nil || name == "" {
			return nil, command.UsageError("--egress-resolve %q: want NAME=IP", s)
		}
		if table == nil {
			table = map[string][]netip.Addr{}
		}
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		table[name] = append(table[name], a)
	}
	return table, nil
}

func splitAll(items []string) []string {
	var out []string
	for _, item := range items {
		for _, s := range strings.Split(item, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// daemonEgressFlags reads serve's and mcp's egress flags: the options
// without their proxy, and the proxy's configuration. Called before the
// worker starts, so that a bad flag stops jaild before it builds anything.
func daemonEgressFlags(c *cli.Context, log *slog.Logger) (run.EgressOptions, egress.Config, error) {
	var o run.EgressOptions
	switch d := c.String("egress-default"); d {
	case "on":
		o.Default = true
	case "off":
	default:
		return o, egress.Config{}, command.UsageError("--egress-default %q: want on or off", d)
	}
	cfg, err := egressConfig(c, log)
	if err != nil {
		return o, cfg, err
	}
	for _, s := range splitAll(c.StringSlice("egress-token-allow")) {
		name, pat, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return o, cfg, command.UsageError("--egress-token-allow %q: want NAME=host:port", s)
		}
		p, err := egress.ParsePattern(pat)
		if err != nil {
			return o, cfg, command.UsageError("--egress-token-allow: %v", err)
		}
		if o.Tokens == nil {
			o.Tokens = map[string][]egress.Pattern{}
		}
		o.Tokens[name] = append(o.Tokens[name], p)
	}
	if len(cfg.Allow) == 0 && len(o.Tokens) == 0 {
		// No egress: requests asking for it are refused. Flags that
		// would grant it are then a mistake, said at once rather than
		// found in a sandbox that cannot reach anything.
		const none = "no destination is allowed (--egress-allow, --egress-token-allow): it would give no network"
		if c.Bool("mcp-egress") {
			return o, cfg, command.UsageError("--mcp-egress: %s", none)
		}
		if o.Default {
			return o, cfg, command.UsageError("--egress-default on: %s", none)
		}
	}
	return o, cfg, nil
}

// daemonEgress gives o its proxy, if the operator allowed anything, with
// its decisions in the audit log and, when a policy is loaded, the
// policy's network rule asked too.
func daemonEgress(o run.EgressOptions, cfg egress.Config, audit *run.AuditLog, pol *policy.Engine) run.EgressOptions {
	if len(cfg.Allow) == 0 && len(o.Tokens) == 0 {
		return o // no egress: requests asking for it are refused
	}
	cfg.OnDecision = audit.Egress
	if pol != nil {
		cfg.Policy = networkPolicy{pol}
	}
	o.Proxy = egress.New(cfg)
	return o
}

// runEgress gives a one-shot run (jaild-server run) its proxy, served in
// this process; denied connections are logged on stderr with --debug.
func runEgress(c *cli.Context, spec *jail.Spec) error {
	cfg, err := egressConfig(c, command.QuietLogger(c))
	if err != nil {
		return err
	}
	p := egress.New(cfg)
	g := egress.Grant{Caller: "run", FrontEnd: "run", Command: strings.Join(spec.Args, " ")}
	spec.Egress = &jail.Egress{Serve: func(ctx context.Context, ln net.Listener) box.EgressUsage {
		return p.Serve(ctx, ln, g)
	}}
	return nil
}

// networkPolicy asks the policy engine about connections (package policy
// imports nothing of jaild's, so the types meet here).
type networkPolicy struct{ e *policy.Engine }

func (n networkPolicy) AllowNetwork(ctx context.Context, q egress.Query) (bool, error) {
	return n.e.AllowNetwork(ctx, policy.NetworkInput(q))
}
