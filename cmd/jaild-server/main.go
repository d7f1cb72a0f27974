// Command jaild-server is the complete jaild: every command in one binary,
// the front ends included (serve, mcp, and the clients remote, session,
// jobs and cp) with the packages they link.
// The lean jaild executes it for those commands. Its serve and mcp start the
// lean jaild next to it as their worker (see internal/worker), which builds
// the sandboxes, so that their init is the lean binary and not this one.
package main

import (
	"github.com/jaild/jaild/internal/command"
	_ "github.com/jaild/jaild/internal/inithook"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session/files"
)

func main() {
	// The files API's writer (see session/files), this binary re-executed.
	files.WriterMain()
	command.Main(
		command.Run(command.RunOptions{Egress: runEgress}),
		command.Doctor(frontEnds),
		mcpCommand,
		serveCommand,
		remoteCommand,
		policyCommand,
		sessionCommand,
		jobsCommand,
		cpCommand,
		command.Drain,
	)
}

// frontEnds is jaild doctor's finding on the front ends, which this binary
// carries itself.
func frontEnds() jail.Finding {
	return jail.Finding{Name: "front ends", OK: true, Detail: "serve, mcp and remote built in"}
}
