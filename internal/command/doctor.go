package command

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jaild/jaild/box"
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
			policyDirFlag,
			WorkspaceRootFlag,
		}, append(ManagerFlags, EgressFlags...)...),
		OnUsageError: OnUsageError,
		Action: func(c *cli.Context) error {
			findings := append(jail.Check(), jail.CheckSlots(), jail.CheckStateDir(c.String("state-dir")),
				jail.CheckWorkspaceRoot(c.String("workspace-root"), c.String("state-dir")), workerMountsFinding(c), workDirFinding(c), frontEnds(), egressFinding(c), policyFinding(c.String("policy-dir")))
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
	forSandboxInits()
	m, err := NewManager(c, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	return m.SelfTest(ctx)
}

// workDirFinding says where the sandboxes' working directory is
// (--sandbox-workdir), or why it cannot be there.
func workDirFinding(c *cli.Context) jail.Finding {
	f := jail.Finding{Name: "sandbox workdir", Required: true}
	wd, err := SandboxWorkDir(c)
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	f.OK = true
	f.Detail = wd + ": the sandboxes' writable working directory (a session's workspace), default cwd and HOME"
	if wd == box.DefaultDir {
		f.Detail += "; --sandbox-workdir (JAILD_SANDBOX_WORKDIR) moves it, e.g. to /workspace"
	}
	return f
}

// workerMountsFinding says whether the daemon's worker would get a mount
// namespace of its own, where the host paths every sandbox binds are bound
// once and each sandbox's own mounts made (see PrivateMounts).
func workerMountsFinding(c *cli.Context) jail.Finding {
	f := jail.Finding{Name: "worker mounts", OK: true}
	if PrivateMounts(c) {
		f.Detail = "the daemon's worker binds /usr and the other host paths once, in a mount namespace of its own, for every sandbox, and mounts each sandbox's /tmp and /work (and /dev/pts and /dev/shm, where sandboxes share a /dev) there before its init starts"
	} else {
		f.Detail = "with --workspace-root, which is seen on the host, the daemon's worker keeps the host's mount namespace, and every sandbox's init binds /usr and the other host paths and mounts its /tmp and /work itself"
	}
	return f
}

// policyDirFlag is serve's and mcp's --policy-dir, read with the same
// variables, so that doctor says what the daemon would decide.
var policyDirFlag = &cli.StringFlag{Name: "policy-dir", EnvVars: []string{"JAILD_POLICY_DIR", "POLICY_DIR"}, Usage: "the policy directory the daemon is given (only reported here)"}

// policyFinding says whether commands are decided by a policy. It counts
// the .rego files but does not load them (the lean binary has no Rego
// engine): `jaild policy test DIR` and `jaild policy eval DIR` do.
func policyFinding(dir string) jail.Finding {
	f := jail.Finding{Name: "policy", OK: true}
	if dir == "" {
		f.Detail = "none: every command is allowed; --policy-dir DIR (JAILD_POLICY_DIR, POLICY_DIR) decides each run with Rego (docs/policy.md)"
		return f
	}
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".rego") {
			n++
		}
		return err
	})
	switch {
	case err != nil:
		f.OK, f.Detail = false, fmt.Sprintf("%s: %v (the daemon would deny every command)", dir, err)
	case n == 0:
		f.OK, f.Detail = false, fmt.Sprintf("%s has no .rego file (the daemon would deny every command)", dir)
	default:
		f.Detail = fmt.Sprintf("%s: %d .rego files; `jaild policy test %s` runs their tests", dir, n, dir)
	}
	return f
}
