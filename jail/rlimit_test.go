package jail_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
	"golang.org/x/sys/unix"
)

// TestRlimitsClamped runs a sandbox from a jaild whose hard NOFILE limit is
// below the sandboxes' 4096, as a container runtime leaves it: the sandbox
// must start, with the lower limit, not fail to raise it.
func TestRlimitsClamped(t *testing.T) {
	requireHost(t)
	env := testenv.New(t, "jaild-test")
	cmd := exec.Command(os.Args[0], "helper-nofile")
	cmd.Env = append(os.Environ(), "JAILD_TEST_STATE="+env.StateDir, "JAILD_TEST_PARENT="+env.Parent)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "doctor: NOFILE clamped to 1000\nsandbox: 1000 1000" {
		t.Errorf("helper said\n%s\nwant the sandbox to run with NOFILE 1000 and doctor to say it is clamped", got)
	}
}

// helperNofile lowers its own hard NOFILE limit to 1000 (for good: raising
// it back takes CAP_SYS_RESOURCE), then runs `ulimit -n; ulimit -Hn` in a
// sandbox on the installation the environment names.
func helperNofile() {
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1000, Max: 1000}); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(1)
	}
	for _, f := range jail.Check() {
		if f.Name == "rlimits" {
			d, _, _ := strings.Cut(f.Detail, " (")
			fmt.Println("doctor:", d)
		}
	}
	m, err := jail.New(jail.Config{StateDir: os.Getenv("JAILD_TEST_STATE"), CgroupParent: os.Getenv("JAILD_TEST_PARENT")})
	if err != nil {
		fmt.Println("jail.New:", err)
		os.Exit(1)
	}
	res, err := m.Run(context.Background(), &jail.Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "echo $(ulimit -n) $(ulimit -Hn)"}}})
	code := 0
	if err != nil {
		fmt.Println("run:", err)
		code = 1
	} else {
		fmt.Printf("sandbox: %s", res.Stdout)
	}
	if err := m.Close(); err != nil {
		fmt.Println("close:", err)
		code = 1
	}
	os.Exit(code)
}
