package main

import (
	"os"
	"slices"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/internal/command"
)

// TestWorkspaceRootFlag: --workspace-root (or its alias --workdir) wins,
// then JAILD_WORKSPACE_ROOT, then MCP_BASH_ROOT_DIR, then the default
// (empty: <state-dir>/workspaces); whichever it is reaches the worker's
// --workspace-root, which the worker reads back.
func TestWorkspaceRootFlag(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		jaild, mcp string // env; "-" leaves it unset
		want       string
	}{
		{"default", nil, "-", "-", ""},
		{"flag", []string{"--workspace-root", "/srv/a"}, "/srv/j", "/srv/m", "/srv/a"},
		{"workdir alias", []string{"--workdir=/srv/w"}, "/srv/j", "/srv/m", "/srv/w"},
		{"jaild env", nil, "/srv/j", "/srv/m", "/srv/j"},
		{"mcp env", nil, "-", "/srv/m", "/srv/m"},
		{"jaild env alone", nil, "/srv/j", "-", "/srv/j"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setenv(t, "JAILD_WORKSPACE_ROOT", tc.jaild)
			setenv(t, "MCP_BASH_ROOT_DIR", tc.mcp)
			args := workerArgsOf(t, tc.args)
			i := slices.Index(args, "--workspace-root")
			if i < 0 || i+1 >= len(args) {
				t.Fatalf("worker args %q lack --workspace-root", args)
			}
			if got := args[i+1]; got != tc.want {
				t.Errorf("front end passes --workspace-root %q, want %q", got, tc.want)
			}
			// The worker, whose environment says otherwise, reads what
			// it was passed.
			setenv(t, "JAILD_WORKSPACE_ROOT", "/srv/other")
			var got string
			app := &cli.App{Flags: command.Worker.Flags, Action: func(c *cli.Context) error {
				got = c.String("workspace-root")
				return nil
			}}
			if err := app.Run(append([]string{"worker"}, args[1:]...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("worker reads --workspace-root %q, want %q", got, tc.want)
			}
		})
	}
}

// workerArgsOf parses args with the flags of serve and returns the worker
// arguments it would start its worker with.
func workerArgsOf(t *testing.T, args []string) []string {
	t.Helper()
	var out []string
	app := &cli.App{
		Flags: slices.Concat(sessionFlags, command.ManagerFlags),
		Action: func(c *cli.Context) error {
			out = command.WorkerArgs(c, command.WorkerOptions{LogFormat: "text"})
			return nil
		},
	}
	if err := app.Run(append([]string{"serve"}, args...)); err != nil {
		t.Fatal(err)
	}
	return out
}

// setenv sets key to v for the test, or unsets it if v is "-".
func setenv(t *testing.T, key, v string) {
	t.Helper()
	t.Setenv(key, v) // restored at cleanup
	if v == "-" {
		os.Unsetenv(key)
	}
}
