// Command jaild runs commands in fresh, locked-down Linux sandboxes built
// with libcontainer: one-shot (jaild run) and, through jaild-server, as an
// HTTP daemon (jaild serve) or an MCP server (jaild mcp).
//
// jaild is the lean binary: run, doctor, and each one-shot sandbox's init
// (libcontainer re-executes the binary that calls it as every container's
// init, and every package init of that binary runs at each start). It
// leaves out the front ends and the packages they link (Prometheus, the MCP
// SDK, net/http) and their package inits, which would run at every start. Its serve, mcp and
// remote execute cmd/jaild-server, installed next to it (see frontend.go).
// scripts/setup.sh builds the pair into bin/.
package main

import (
	"github.com/jaild/jaild/internal/command"
	_ "github.com/jaild/jaild/internal/inithook"
)

func main() {
	command.Main(
		command.Run,
		command.Doctor(frontEnds),
		mcpCommand,
		serveCommand,
		remoteCommand,
	)
}
