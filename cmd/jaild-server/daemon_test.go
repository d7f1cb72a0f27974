package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// flagsByName maps every name and alias of cmd's flags to the flag.
func flagsByName(t *testing.T, cmd *cli.Command) map[string]cli.DocGenerationFlag {
	t.Helper()
	m := map[string]cli.DocGenerationFlag{}
	for _, f := range cmd.Flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			t.Fatalf("jaild %s --%s: %T has no default or env vars to compare", cmd.Name, f.Names()[0], f)
		}
		for _, n := range f.Names() {
			if _, dup := m[n]; dup {
				t.Errorf("jaild %s declares --%s twice", cmd.Name, n)
			}
			m[n] = df
		}
	}
	return m
}

// describe is what --help and the environment make of a flag.
func describe(f cli.DocGenerationFlag) string {
	return fmt.Sprintf("%T names %q default %q (text %q) env %q usage %q",
		f, f.Names(), f.GetValue(), f.GetDefaultText(), f.GetEnvVars(), f.GetUsage())
}

// TestDaemonFlagsAgree: a flag that jaild serve and jaild mcp both take is
// one flag, with the same names, default, environment variables and help
// in both: one daemon behind two transports, configured the same way.
func TestDaemonFlagsAgree(t *testing.T) {
	serve, mcp := flagsByName(t, serveCommand), flagsByName(t, mcpCommand)
	var shared []string
	for name, sf := range serve {
		mf, ok := mcp[name]
		if !ok {
			continue
		}
		shared = append(shared, name)
		if s, m := describe(sf), describe(mf); s != m {
			t.Errorf("--%s differs:\n serve: %s\n   mcp: %s", name, s, m)
		}
	}
	// Every daemon flag is in both (the list is what the commands share).
	for _, f := range daemonFlags {
		if !slices.Contains(shared, f.Names()[0]) {
			t.Errorf("--%s is a daemon flag but not in both commands", f.Names()[0])
		}
	}
	slices.Sort(shared)
	t.Logf("%d names shared: %s", len(shared), strings.Join(shared, " "))
}

// TestDaemonFlagsHaveEnv: every flag of serve and mcp can be set from a
// JAILD_* environment variable (the container images and systemd units
// configure jaild that way), but --stdio, which changes nothing.
func TestDaemonFlagsHaveEnv(t *testing.T) {
	for _, cmd := range []*cli.Command{serveCommand, mcpCommand} {
		for _, f := range cmd.Flags {
			name := f.Names()[0]
			if name == "stdio" {
				continue
			}
			env := f.(cli.DocGenerationFlag).GetEnvVars()
			if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "JAILD_") }) {
				t.Errorf("jaild %s --%s has no JAILD_* variable: %q", cmd.Name, name, env)
			}
		}
	}
}
