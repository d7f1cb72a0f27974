package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/server"
)

// mcpToolsFlag is serve's and mcp's --mcp-tools: which MCP tools to serve.
func mcpToolsFlag() *cli.StringSliceFlag {
	return &cli.StringSliceFlag{
		Name:    "mcp-tools",
		Value:   cli.NewStringSlice(server.DefaultMCPTools...),
		EnvVars: []string{"JAILD_MCP_TOOLS"},
		Usage: "MCP tools to serve, of " + strings.Join(server.MCPTools, ", ") +
			" (the policy-runner convention's tool: {executable, args, cwd, env} -> {stdout, stderr, exitCode}, 1 MiB per stream); with --mcp-session auto and bash, task_output, kill_task and list_tasks are served too",
	}
}

// mcpTools reads --mcp-tools; a name that is no tool is a usage error, so
// that a typo does not start a daemon without the tool its clients expect.
func mcpTools(c *cli.Context) ([]string, error) {
	var names []string
	for _, v := range c.StringSlice("mcp-tools") {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	if err := server.CheckMCPTools(names); err != nil {
		return nil, command.UsageError("--mcp-tools: %v", err)
	}
	return names, nil
}
