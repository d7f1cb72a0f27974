// Command jaild runs commands in fresh, locked-down Linux sandboxes built
// with libcontainer: one-shot (jaild run) and, through jaild-server, as an
// HTTP daemon (jaild serve) or an MCP server (jaild mcp).
//
// jaild is the lean binary: run, doctor, and the init of every sandbox
// (libcontainer re-executes the binary that builds a container as its init,
// and every package init of that binary runs at each start): of one-shot
// runs, and of the daemon's, which the hidden "jaild worker" that jaild
// serve and jaild mcp start builds (see internal/worker). It leaves out the
// front ends and the packages they link (Prometheus, the MCP SDK, net/http)
// and their package inits. Its serve, mcp, remote and policy execute
// cmd/jaild-server, installed next to it (see frontend.go).
// scripts/setup.sh builds the pair into bin/.
package main

import (
	"github.com/jaild/jaild/internal/command"
	_ "github.com/jaild/jaild/internal/inithook"
)

func main() {
	command.Main(
		// run with egress needs the proxy, which jaild-server carries.
		command.Run(command.RunOptions{Delegate: execServer}),
		command.Doctor(frontEnds),
		mcpCommand,
		serveCommand,
		remoteCommand,
		policyCommand,
		sessionCommand,
		jobsCommand,
		cpCommand,
		command.Drain,
		command.Worker,
	)
}
