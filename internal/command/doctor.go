package command

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/jaild/jaild/jail"
	"github.com/urfave/cli/v2"
)

// Doctor is the doctor command; frontEnds is the binary's own finding on
// serve, mcp and remote.
func Doctor(frontEnds func() jail.Finding) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check what sandboxes need on this host and what is missing",
		Description: `Prints one line per check (ok, MISSING for a required part, warn for an
optional one), then runs a real sandbox unless a required part is missing.
Exits 0 when sandboxes work, 121 otherwise (120 when not root).`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the findings as JSON"},
		}, append(ManagerFlags, EgressFlags...)...),
		OnUsageError: OnUsageError,
		Action: func(c *cli.Context) error {
			findings := append(jail.Check(), jail.CheckStateDir(c.String("state-dir")), frontEnds(), egressFinding(c))
			ok := true
			for _, f := range findings {
				ok = ok && (f.OK || !f.Required)
			}
			if ok {
				f := jail.Finding{Name: "sandbox", Required: true}
				if err := selfTest(c); err != nil {
					f.Detail = err.Error()
				} else {
					f.OK, f.Detail = true, "ran a command in a real sandbox"
				}
				ok = f.OK
				findings = append(findings, f)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				_ = enc.Encode(findings)
			} else {
				for _, f := range findings {
					status := "ok"
					switch {
					case !f.OK && f.Required:
						status = "MISSING"
					case !f.OK:
						status = "warn"
					}
					fmt.Printf("%-8s %-20s %s\n", status, f.Name, f.Detail)
				}
			}
			if !ok {
				if os.Geteuid() != 0 {
					return cli.Exit("", exitNotRoot)
				}
				return cli.Exit("", exitUnsupported)
			}
			return nil
		},
	}
}

func selfTest(c *cli.Context) error {
	m, err := NewManager(c, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	return m.SelfTest(ctx)
}
