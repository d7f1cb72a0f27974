package command

import "github.com/urfave/cli/v2"

// WorkspaceRootFlag says where sessions' workspaces are mounted
// (jail.Config.WorkspaceRoot): a flag of serve and mcp, which pass it to
// their worker (WorkerArgs), and of doctor, which checks it. --workdir and
// MCP_BASH_ROOT_DIR are the names of the per-request-workdir convention
// (flag, then env fallback); the flag under either name wins, then
// JAILD_WORKSPACE_ROOT, then MCP_BASH_ROOT_DIR (urfave/cli takes the first
// env var set), then the default.
var WorkspaceRootFlag = &cli.StringFlag{
	Name: "workspace-root", Aliases: []string{"workdir"},
	EnvVars:     []string{"JAILD_WORKSPACE_ROOT", "MCP_BASH_ROOT_DIR"},
	DefaultText: "<state-dir>/workspaces",
	Usage:       "directory the sessions' workspaces (each a tmpfs of --workspace-size) are mounted in, as <dir>/<id>; it must be root's, writable by no one else up to /, and closed to group and others, and is made (mode 0700) if missing",
}
