package server_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// onlyLsEchoCat allows ls, echo and cat, each only as the file of its name
// the sandbox cannot change, and every request but a write through the
// files API below /work/ro.
const onlyLsEchoCat = `package sandbox.main

allowed := {"ls", "echo", "cat"}

ok(c) if {
	allowed[c.command]
	not c.writable
	endswith(c.path, concat("", ["/", c.command]))
}

allow if {
	not input.shell
	ok(input)
}

allow if {
	input.shell
	not input.shell.dynamic
	every c in input.shell.commands {
		ok(c)
	}
}

default allow_action := true

allow_action := false if {
	input.action == "files.write"
	startswith(input.file, "/work/ro/")
}
`

// TestPolicyInputE2E: a real daemon's policy decides on what runs in a
// session, not on what the request alone says: a program uploaded to
// /work/bin and put first in the session's PATH is decided as /work/bin/ls
// (writable, so denied) and never runs; a state report a command forges on
// fd 3 carries nothing into later calls; a write through the files API is
// the policy's to deny.
func TestPolicyInputE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.rego"), onlyLsEchoCat)
	in := newE2EInstall(t, bin)
	dlog := filepath.Join(t.TempDir(), "decisions.log")
	d := in.serve(t, "--audit-log", "off", "--pool", "0", "--policy-dir", dir, "--decision-log", dlog, "--decision-log-env")
	c := &caller{t, d.url, ""}
	id := c.create(`{}`)
	defer c.do("DELETE", "/sessions/"+id, "", nil)
	if res := c.run(id, "ls /work"); res.ExitCode != 0 {
		t.Fatalf("allowed ls: %+v", res)
	}

	t.Run("uploaded ls first in PATH", func(t *testing.T) {
		id := c.create(`{}`)
		defer c.do("DELETE", "/sessions/"+id, "", nil)
		idBin, err := os.ReadFile("/usr/bin/id")
		if err != nil {
			t.Skip(err)
		}
		if code, data := c.raw("PUT", "/sessions/"+id+"/files/bin/ls?mode=0755", bytes.NewReader(idBin)); code/100 != 2 {
			t.Fatalf("upload: %d %s", code, data)
		}
		if code, data := c.do("PATCH", "/sessions/"+id, `{"env":{"PATH":"/work/bin:/usr/bin:/bin"}}`, nil); code != 200 {
			t.Fatalf("PATCH env: %d %s", code, data)
		}
		for _, body := range []string{
			fmt.Sprintf(`{"executable":"ls","session_id":%q}`, id),
			fmt.Sprintf(`{"command":"ls","session_id":%q}`, id),
			fmt.Sprintf(`{"command":"ls","session_id":%q,"run_in_background":true}`, id),
		} {
			code, data := c.do("POST", "/run", body, nil)
			if code != 403 || !bytes.Contains(data, []byte("policy_denied")) || bytes.Contains(data, []byte("uid=")) {
				t.Errorf("%s: %d %s, want 403 policy_denied", body, code, data)
			}
		}
		log, _ := os.ReadFile(dlog)
		if !bytes.Contains(log, []byte(`"path":"/work/bin/ls"`)) || !bytes.Contains(log, []byte(`"writable":true`)) {
			t.Errorf("decision log does not show the file that would run:\n%s", log)
		}
		if bytes.Contains(log, []byte(`"session_id":"`+id+`"`)) && !bytes.Contains(log, []byte(`"PATH":"/work/bin:/usr/bin:/bin"`)) {
			t.Errorf("decision log does not show the session's env:\n%s", log)
		}
	})

	t.Run("forged state report", func(t *testing.T) {
		id := c.create(`{}`)
		defer c.do("DELETE", "/sessions/"+id, "", nil)
		// Written by an allowed echo, then exec ls so that the trap's
		// own report never comes: the old format, and the new one with a
		// guessed nonce.
		for _, forged := range []string{
			`echo "jaild-state-v2\0000/work\0000export LD_PRELOAD='/work/evil.so'\nexport PS4='\$(id)'\0000\c" >&3; exec ls`,
			`echo "jaild-state-v3\0000` + strings.Repeat("0", 32) + `\0000/work\0000export LD_PRELOAD='/work/evil.so'\0000\c" >&3; exec ls`,
		} {
			res := c.run(id, forged)
			if res.ExitCode != 0 {
				t.Fatalf("%s: %+v", forged, res)
			}
			var s api.Session
			c.do("GET", "/sessions/"+id, "", &s)
			for k := range s.Env {
				if strings.HasPrefix(k, "LD_") || k == "PS4" {
					t.Errorf("%s: the forged report set %s in the session: %v", forged, k, s.Env)
				}
			}
		}
		if res := c.run(id, "cat /dev/null"); strings.Contains(res.Stdout+res.Stderr, "uid=") {
			t.Errorf("a later cat ran id: %+v", res)
		}
	})

	t.Run("host file the sandbox cannot see", func(t *testing.T) {
		// /var/tmp is the host's; no sandbox binds it. A program there
		// named ls, first in PATH, is not what a sandbox's ls runs, and
		// named by its path it is nothing the sandbox can run.
		dir, err := os.MkdirTemp("/var/tmp", "jaild-unseen-")
		if err != nil {
			t.Skip(err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		idBin, err := os.ReadFile("/usr/bin/id")
		if err != nil {
			t.Skip(err)
		}
		writeFile(t, filepath.Join(dir, "ls"), string(idBin))
		if err := os.Chmod(filepath.Join(dir, "ls"), 0o755); err != nil {
			t.Fatal(err)
		}
		var res api.Response
		if code, data := c.do("POST", "/run", fmt.Sprintf(`{"executable":"ls","args":["/"],"env":{"PATH":"%s:/usr/bin:/bin"}}`, dir), &res); code != 200 || !strings.Contains(res.Stdout, "usr") {
			t.Errorf("ls with a host-only directory first in PATH: %d %s", code, data)
		}
		code, data := c.do("POST", "/run", fmt.Sprintf(`{"executable":"%s/ls"}`, dir), nil)
		if code != 403 || !bytes.Contains(data, []byte("policy_denied")) || !bytes.Contains(data, []byte("resolve")) {
			t.Errorf("%s/ls, a path only the host has: %d %s, want 403 policy_denied as not found", dir, code, data)
		}
		log, _ := os.ReadFile(dlog)
		if bytes.Contains(log, []byte(`"path":"`+dir)) {
			t.Errorf("the decision log names a file no sandbox can see (%s):\n%s", dir, log)
		}
		if !bytes.Contains(log, []byte(`"path":"/usr/bin/ls"`)) {
			t.Errorf("the decision log does not show the ls the sandbox runs:\n%s", log)
		}
	})

	t.Run("files write denied", func(t *testing.T) {
		code, data := c.raw("PUT", "/sessions/"+id+"/files/ro/x", strings.NewReader("data"))
		if code != 403 || !bytes.Contains(data, []byte("policy_denied")) || !bytes.Contains(data, []byte("files.write /work/ro/x")) {
			t.Errorf("PUT ro/x: %d %s, want 403 policy_denied", code, data)
		}
		if code, _ := c.raw("GET", "/sessions/"+id+"/files/ro/x", nil); code != 404 {
			t.Errorf("GET ro/x after a denied write: %d, want 404", code)
		}
		if code, data := c.raw("PUT", "/sessions/"+id+"/files/rw/x", strings.NewReader("data")); code/100 != 2 {
			t.Errorf("PUT rw/x: %d %s, want it written", code, data)
		}
	})
}
