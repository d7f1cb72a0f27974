package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
)

// TestDaemonBadFlags: jaild serve and jaild mcp read the flags they share
// alike: the same bad setting stops both with the same exit status and an
// error naming the same flag, before anything is built (the state dir
// stays empty).
func TestDaemonBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--pool", "-1"}, api.ExitUsage, "--pool"},
		{[]string{"--queue-wait", "0"}, api.ExitUsage, "--queue-wait"},
		{[]string{"--max-timeout", "25h"}, api.ExitUsage, "--max-timeout"},
		// 20m is within jail's bounds: an MCP tool call gets at most 10m
		// of it, and the flag after it is the one at fault.
		{[]string{"--max-timeout", "20m", "--queue", "-1"}, api.ExitUsage, "--queue"},
		{[]string{"--max-output", "lots"}, api.ExitUsage, "--max-output"},
		{[]string{"--mcp-max-output", "0"}, api.ExitUsage, "--mcp-max-output"},
		{[]string{"--mcp-tools", "bash,bogus"}, api.ExitUsage, "--mcp-tools"},
		{[]string{"--max-output-memory", "1M"}, api.ExitUsage, "--max-output-memory"},
		{[]string{"--log-format", "xml"}, api.ExitUsage, "--log-format"},
		{[]string{"--config", "/nonexistent/jaild.conf"}, api.ExitUsage, "config"},
		{[]string{"--workspace-size", "0"}, api.ExitUsage, "--workspace-size"},
		{[]string{"--mcp-session", "maybe"}, api.ExitUsage, "--mcp-session"},
		{[]string{"--session-prestart-idle", "-1s"}, api.ExitUsage, "--session-prestart-idle"},
		{[]string{"--session-prestart-idle", "soon"}, api.ExitUsage, "session-prestart-idle"},
		{[]string{"--total-memory", "much"}, api.ExitUsage, "--total-memory"},
		{[]string{"--policy-dir", "/nonexistent", "--policy-mode", "bogus"}, api.ExitUsage, "--policy-mode"},
		// Not a flag's value but a file that cannot be opened: the same
		// internal error in both, still before the worker builds anything.
		{[]string{"--audit-log", "/nonexistent/audit.log"}, api.ExitInternal, "audit"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for _, command := range []string{"serve", "mcp"} {
				state := t.TempDir()
				cmd := exec.Command(jaildBin, append([]string{command, "--state-dir", state}, tc.args...)...)
				// serve binds its address before it opens the audit log:
				// not the default port, which something else may hold.
				cmd.Env = []string{"PATH=/usr/bin:/bin", "JAILD_LISTEN=127.0.0.1:0"}
				out, err := cmd.CombinedOutput()
				if code := exitCode(err); code != tc.code || !strings.Contains(string(out), tc.want) {
					t.Errorf("jaild %s: exit %d, want %d and %q:\n%s", command, code, tc.code, tc.want, out)
				}
				if ents, _ := os.ReadDir(state); len(ents) != 0 {
					t.Errorf("jaild %s: the state dir has %d entries: something was built before the error", command, len(ents))
				}
			}
		})
	}
}

// TestWorkerGOMAXPROCS: the front end starts its worker, which builds the
// sandboxes, with GOMAXPROCS=1 in its environment: libcontainer passes
// that variable of the builder's environment, and no other, to every
// sandbox's init, whose runtime would otherwise size itself for every CPU
// of the host. The worker's own runtime is sized as if it were unset. An
// operator's GOMAXPROCS reaches both unchanged.
func TestWorkerGOMAXPROCS(t *testing.T) {
	defaultProcs := defaultGOMAXPROCS(t)
	for _, tc := range []struct {
		name       string
		env        string // the operator's GOMAXPROCS; "" leaves it unset
		wantEnv    string // the worker's
		wantWorker int    // the worker's runtime; 0: the default
	}{
		{"unset", "", "1", 0},
		{"operator's", "3", "3", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstall(t)
			var env []string
			if tc.env != "" {
				env = append(env, "GOMAXPROCS="+tc.env)
			}
			_, log := startServeEnv(t, in, false, env, "--debug")
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", serveWorker(t)))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if bytes.HasPrefix(kv, []byte("GOMAXPROCS=")) {
					got = append(got, string(kv))
				}
			}
			if want := "GOMAXPROCS=" + tc.wantEnv; len(got) != 1 || got[0] != want {
				t.Errorf("the worker's environment has %q, want %s", got, want)
			}
			log.waitFor(t, `"msg":"worker ready"`)
			procs := workerProcs(t, log.String())
			switch {
			case tc.wantWorker != 0 && procs != tc.wantWorker:
				t.Errorf("the worker's runtime has GOMAXPROCS %d, want the operator's %d", procs, tc.wantWorker)
			case tc.wantWorker == 0 && procs != defaultProcs:
				t.Errorf("the worker's runtime has GOMAXPROCS %d, want the default %d", procs, defaultProcs)
			}
		})
	}
}

// printGOMAXPROCS, set in this test binary's environment, makes it print
// its runtime's GOMAXPROCS and exit (see TestMain).
const printGOMAXPROCS = "JAILD_TEST_PRINT_GOMAXPROCS"

// defaultGOMAXPROCS is the GOMAXPROCS a Go program started here without the
// variable gets: this test binary run again, without GOMAXPROCS (this
// process's own may have been set by the variable or by go test -cpu).
func defaultGOMAXPROCS(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{printGOMAXPROCS + "=1"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", os.Args[0], err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s printed %q: %v", os.Args[0], out, err)
	}
	return n
}

// workerProcs reads the worker's GOMAXPROCS from its "worker ready" line in
// the daemon's JSON log.
func workerProcs(t *testing.T, log string) int {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Msg        string
			GOMAXPROCS int `json:"gomaxprocs"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "worker ready" {
			return line.GOMAXPROCS
		}
	}
	t.Fatalf("no worker ready line in the log:\n%s", log)
	return 0
}
