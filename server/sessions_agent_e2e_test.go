package server_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// The agent's loop over HTTP, end to end through a real daemon: a project
// uploaded as a tar, built and run in calls, its build output downloaded as
// a tar, the session deleted with nothing left. Then what one session may not
// see of another (files, processes, ports), and the workspace quota.

// agentProject is a small C and Python project: build.sh compiles the C
// program and has Python write a report; the program counts its input.
var agentProject = map[string]string{
	"build.sh": "set -e\nmkdir -p out\ncc -O2 -Wall -o out/wc wc.c\npython3 gen.py > out/report.txt\necho built\n",
	"wc.c": `#include <stdio.h>
#include "count.h"
int main(void) {
	struct counts c = count(stdin);
	printf("lines=%ld words=%ld\n", c.lines, c.words);
	return 0;
}
`,
	"count.h": `#include <ctype.h>
struct counts { long lines, words; };
static struct counts count(FILE *f) {
	struct counts c = {0, 0};
	int ch, in = 0;
	while ((ch = getc(f)) != EOF) {
		if (ch == '\n') c.lines++;
		if (isspace(ch)) in = 0; else if (!in) { in = 1; c.words++; }
	}
	return c;
}
`,
	"gen.py":         "import sys\nprint('report', sum(range(10)), sys.version_info[0])\n",
	"data/input.txt": "one two\nthree\nfour five six\n",
}

// tarOf archives files (name -> content) with their directories.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dirs := map[string]bool{}
	for name, content := range files {
		if d := filepath.Dir(name); d != "." && !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// untar reads an archive into name -> entry.
type tarEntry struct {
	typ  byte
	mode int64
	data []byte
}

func untar(t *testing.T, data []byte) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading the downloaded tar: %v", err)
		}
		body, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(hdr.Name, "./")] = tarEntry{hdr.Typeflag, hdr.Mode, body}
	}
}

// testSessionsAgent is the HTTP agent scenario, isolation and quota, on a
// daemon of its own so that its leak check sees only what it made.
func testSessionsAgent(t *testing.T, bin string) {
	in := newE2EInstall(t, bin)
	tokens, ta, _ := twoCallers(t)
	d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0", "--workspace-size", "64M")
	alice := &caller{t, d.url, ta}

	t.Run("project: upload, build, run, download, delete", func(t *testing.T) {
		id := alice.create(`{}`)
		base := "/sessions/" + id + "/files/"
		code, data := alice.raw("PUT", base+"proj", bytes.NewReader(tarOf(t, agentProject)), "Content-Type", "application/x-tar")
		if code != 204 {
			t.Fatalf("PUT the project's tar: %d %s", code, data)
		}
		res := alice.run(id, "cd /work/proj && find . -type f | LC_ALL=C sort | tr '\\n' ' '")
		if want := "./build.sh ./count.h ./data/input.txt ./gen.py ./wc.c "; res.Stdout != want {
			t.Errorf("the unpacked project: %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
		}
		res = alice.run(id, "bash build.sh") // in /work/proj, the cwd of the last call
		if res.ExitCode != 0 || res.Stdout != "built\n" {
			t.Fatalf("build: %+v", res)
		}
		res = alice.run(id, "./out/wc < data/input.txt && cat out/report.txt")
		if want := "lines=3 words=6\nreport 45 3\n"; res.ExitCode != 0 || res.Stdout != want {
			t.Errorf("run the build: %q (exit %d, stderr %q), want %q", res.Stdout, res.ExitCode, res.Stderr, want)
		}

		code, data = alice.raw("GET", base+"proj/out", nil, "Accept", "application/x-tar")
		if code != 200 {
			t.Fatalf("GET the build output as a tar: %d %s", code, data)
		}
		got := untar(t, data)
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		if len(got) != 2 {
			t.Errorf("the build output holds %v, want wc and report.txt", names)
		}
		if e := got["wc"]; e.typ != tar.TypeReg || !bytes.HasPrefix(e.data, []byte("\x7fELF")) || e.mode&0o111 == 0 {
			t.Errorf("wc in the tar: type %c mode %o, %d bytes starting %.4q; want an executable ELF file", e.typ, e.mode, len(e.data), e.data)
		}
		if e := got["report.txt"]; string(e.data) != "report 45 3\n" {
			t.Errorf("report.txt in the tar: %q", e.data)
		}

		if code, data := alice.do("DELETE", "/sessions/"+id, "", nil); code != 204 {
			t.Fatalf("DELETE: %d %s", code, data)
		}
		if code, _ := alice.raw("GET", base+"proj/out/report.txt", nil); code != 404 {
			t.Errorf("GET a file of the deleted session: %d, want 404", code)
		}
		// testenv's leak check, less what a running daemon keeps (its
		// worker's watchdog and the parent cgroup); the whole check runs
		// once the daemon has stopped, at the end of the test.
		checkSessionLeftovers(t, in.Install)
	})

	t.Run("isolation: files, processes, ports", func(t *testing.T) {
		a, b := alice.create(`{}`), alice.create(`{}`)
		t.Cleanup(func() {
			alice.do("DELETE", "/sessions/"+a, "", nil)
			alice.do("DELETE", "/sessions/"+b, "", nil)
		})
		alice.run(a, "echo secret > /work/a-secret")
		alice.run(b, "echo mine > /work/b-file")
		if res := alice.run(b, "ls -A /work"); res.Stdout != "b-file\n" {
			t.Errorf("B lists /work: %q (stderr %q), want only its own file", res.Stdout, res.Stderr)
		}
		if res := alice.run(a, "ls -A /work"); res.Stdout != "a-secret\n" {
			t.Errorf("A lists /work: %q (stderr %q), want only its own file", res.Stdout, res.Stderr)
		}
		// A background server in A, with a process name no other has.
		var acc api.JobAccepted
		body := fmt.Sprintf(`{"command":"sleep %s & exec python3 -m http.server 8201 --bind 127.0.0.1","session_id":%q,"run_in_background":true}`, in.marker, a)
		if code, data := alice.do("POST", "/run", body, &acc); code != 202 {
			t.Fatalf("A's server: %d %s", code, data)
		}
		res := alice.run(a, "for i in $(seq 200); do curl -sf http://127.0.0.1:8201/a-secret && exit 0; sleep 0.05; done; exit 1")
		if res.ExitCode != 0 || res.Stdout != "secret\n" {
			t.Fatalf("A reaches its own server: %+v", res)
		}
		eventually(t, "A's job to show on the host", func() bool { return len(pidsWith(in.marker)) == 1 })
		res = alice.run(b, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8201/a-secret; echo \" exit=$?\"")
		if res.Stdout != "000 exit=7\n" {
			t.Errorf("B reaches A's port: %q (stderr %q), want connection refused", res.Stdout, res.Stderr)
		}
		res = alice.run(b, "ps -eo args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
		if res.ExitCode != 0 || strings.Contains(res.Stdout, in.marker) || strings.Contains(res.Stdout, "http.server") || !strings.Contains(res.Stdout, "ps -eo args") {
			t.Errorf("B's process list (exit %d):\n%s", res.ExitCode, res.Stdout)
		}
		if code, data := alice.do("DELETE", "/sessions/"+a+"/jobs/"+acc.JobID, "", nil); code != 200 {
			t.Errorf("kill A's server: %d %s", code, data)
		}
		eventually(t, "A's job to go", func() bool { return len(pidsWith(in.marker)) == 0 })
	})

	t.Run("quota stops dd, the session stays usable", func(t *testing.T) {
		id := alice.create(fmt.Sprintf(`{"workspace_bytes":%d}`, 16<<20))
		t.Cleanup(func() { alice.do("DELETE", "/sessions/"+id, "", nil) })
		res := alice.run(id, "echo before > /work/kept; dd if=/dev/zero of=/work/big bs=1M count=64")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") || res.TimedOut || res.OOMKilled {
			t.Errorf("dd past the quota: exit %d, timed out %v, oom %v, stderr %q", res.ExitCode, res.TimedOut, res.OOMKilled, res.Stderr)
		}
		var s api.Session
		alice.do("GET", "/sessions/"+id, "", &s)
		if s.WorkspaceBytesMax != 16<<20 || s.WorkspaceBytesUsed < 15<<20 || s.WorkspaceBytesUsed > 16<<20 {
			t.Errorf("workspace after dd: used %d of %d, want it full", s.WorkspaceBytesUsed, s.WorkspaceBytesMax)
		}
		res = alice.run(id, "stat -c %s /work/big; rm /work/big && echo after > /work/new && cat /work/kept /work/new")
		size, rest, _ := strings.Cut(res.Stdout, "\n")
		if n, err := strconv.ParseInt(size, 10, 64); err != nil || n <= 0 || n > 16<<20 || rest != "before\nafter\n" || res.ExitCode != 0 {
			t.Errorf("after the quota: %q (exit %d, stderr %q), want big's size up to 16 MiB, then before and after", res.Stdout, res.ExitCode, res.Stderr)
		}
	})

	if err := d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("jaild serve exit: %v", err)
	}
	in.Check(t) // also at cleanup; here to fail this subtest by name
}

// checkSessionLeftovers is testenv's leak check for what a deleted session
// had, while its daemon runs: sandboxes' processes and container state,
// uid slots (the daemon has no pool), workspace tmpfs and network namespace
// mounts and their entries.
func checkSessionLeftovers(t *testing.T, in *testenv.Install) {
	t.Helper()
	name := filepath.Base(in.Parent)
	if procs := testenv.ProcsInCgroup(name); len(procs) > 0 {
		t.Errorf("processes left in cgroup %s: %v", name, procs)
	}
	if ents, _ := os.ReadDir(filepath.Join(in.StateDir, "containers")); len(ents) > 0 {
		t.Errorf("container state left behind: %d dirs", len(ents))
	}
	if slots := testenv.Slots(in.StateDir); len(slots) > 0 {
		t.Errorf("uid slots still recorded: %v", slots)
	}
	if mounts := testenv.MountsUnder(in.StateDir); len(mounts) > 0 {
		t.Errorf("mounts left under the state dir: %v", mounts)
	}
	for _, d := range []string{"workspaces", "netns"} {
		if names := dirNames(filepath.Join(in.StateDir, d)); len(names) > 0 {
			t.Errorf("left in %s: %v", d, names)
		}
	}
}
