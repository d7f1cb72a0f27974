package command

import (
	"cmp"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/jail"
)

// EgressFlags configure the egress proxy (package egress): run's, serve's
// and mcp's. They are declared here, without the proxy, so that the lean
// jaild knows them; the proxy itself is linked into jaild-server only (it
// needs net/http, which the lean binary leaves out).
var EgressFlags = []cli.Flag{
	&cli.StringSliceFlag{Name: "egress-allow", EnvVars: []string{"JAILD_EGRESS_ALLOW"}, Usage: "host:port a sandbox given egress may reach through jaild's proxy: api.example.com:443, *.pypi.org:443, 10.1.2.3:443 (repeatable, or comma-separated; default none)"},
	&cli.StringSliceFlag{Name: "egress-allow-cidr", EnvVars: []string{"JAILD_EGRESS_ALLOW_CIDR"}, Usage: "address range the proxy may dial even though it is private, loopback or link-local (repeatable; default none). An allowed name is still needed"},
	&cli.StringSliceFlag{Name: "egress-resolve", EnvVars: []string{"JAILD_EGRESS_RESOLVE"}, Usage: "NAME=IP the proxy resolves NAME to without asking DNS, like curl --resolve (repeatable)"},
	&cli.StringFlag{Name: "egress-max-bytes", Value: "1G", EnvVars: []string{"JAILD_EGRESS_MAX_BYTES"}, Usage: "bytes one run (or one session with egress, over its life) may move through the proxy, both ways together (0: no cap)"},
	&cli.Int64Flag{Name: "egress-max-conns", Value: 256, EnvVars: []string{"JAILD_EGRESS_MAX_CONNS"}, Usage: "connections one run (or one session with egress, over its life) may open through the proxy (0: no cap)"},
}

// DaemonEgressFlags are serve's and mcp's besides EgressFlags.
var DaemonEgressFlags = []cli.Flag{
	&cli.StringFlag{Name: "egress-default", Value: "off", EnvVars: []string{"JAILD_EGRESS_DEFAULT"}, Usage: `"on": a request without an egress field gets the allowlist; "off": it gets no network`},
	&cli.StringSliceFlag{Name: "egress-token-allow", EnvVars: []string{"JAILD_EGRESS_TOKEN_ALLOW"}, Usage: "NAME=host:port: the token NAME's own allowlist, which replaces --egress-allow for its requests (repeatable)"},
	&cli.BoolFlag{Name: "mcp-egress", EnvVars: []string{"JAILD_MCP_EGRESS"}, Usage: "MCP calls get egress (the allowlist): with --mcp-session none each bash and execute call may ask for it with \"egress\": true; with --mcp-session auto each MCP session's workspace has it, for all its calls and tasks"},
}

// wantsEgress reports whether run was asked for egress.
func wantsEgress(c *cli.Context) bool { return len(c.StringSlice("egress-allow")) > 0 }

// runArgs are the arguments that followed "run" on the command line.
func runArgs() []string {
	for i, a := range os.Args {
		if a == "run" {
			return os.Args[i+1:]
		}
	}
	return os.Args[1:]
}

// egressFinding is doctor's line on egress: off (the default), or the
// allowlist the flags and JAILD_EGRESS_* give. It is never a missing part.
func egressFinding(c *cli.Context) jail.Finding {
	f := jail.Finding{Name: "egress", OK: true}
	var pats []string
	for _, item := range c.StringSlice("egress-allow") {
		for _, p := range strings.Split(item, ",") {
			if p = strings.TrimSpace(p); p != "" {
				pats = append(pats, p)
			}
		}
	}
	if len(pats) == 0 {
		f.Detail = "off: sandboxes have loopback only; --egress-allow HOST:PORT (JAILD_EGRESS_ALLOW) opens named destinations through jaild's proxy (docs/egress.md)"
		return f
	}
	f.Detail = fmt.Sprintf("allowlist of %d: %s, through jaild's proxy (jaild-server; --egress-default %s)",
		len(pats), strings.Join(pats, " "), cmp.Or(os.Getenv("JAILD_EGRESS_DEFAULT"), "off"))
	return f
}
