package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// TestDrainE2E: a draining daemon takes no new work (503 draining with
// Retry-After; /readyz fails, /livez passes), serves its sessions while
// they are used, removes each once idle, and exits 0 once none is left;
// through SIGTERM and through jaild drain.
func TestDrainE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	t.Run("SIGTERM", func(t *testing.T) {
		testDrain(t, bin, func(in *e2eInstall, d *daemon) { d.cmd.Process.Signal(syscall.SIGTERM) })
	})
	t.Run("jaild drain --wait", func(t *testing.T) {
		waited := make(chan error, 1)
		testDrain(t, bin, func(in *e2eInstall, d *daemon) {
			cmd := exec.Command(in.bin, "drain", "--wait", "--timeout", "2m")
			cmd.Env = in.env()
			go func() {
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "drained") {
					t.Errorf("jaild drain --wait: %v: %s", err, out)
				}
				waited <- err
			}()
		})
		// --wait returned, and only once the daemon had exited.
		<-waited
	})
	t.Run("a second SIGTERM ends the drain", func(t *testing.T) {
		in := newE2EInstall(t, bin)
		tokens, ta, _ := twoCallers(t)
		d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0", "--drain-timeout", "10m", "--drain-idle", "10m")
		alice := &caller{t, d.url, ta}
		alice.create(`{}`)
		d.cmd.Process.Signal(syscall.SIGTERM)
		eventually(t, "/readyz to fail", func() bool { r, _ := get(t, d.url+"/readyz"); return r.StatusCode == 503 })
		if err := d.stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("jaild serve exit: %v\n%s", err, d.log.Bytes())
		}
	})
	t.Run("jaild drain without a daemon", func(t *testing.T) {
		in := newE2EInstall(t, bin)
		cmd := exec.Command(in.bin, "drain")
		cmd.Env = in.env()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != api.ExitUsage || !strings.Contains(string(out), "no jaild serve") {
			t.Errorf("jaild drain with no daemon: %v: %s", err, out)
		}
	})
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func testDrain(t *testing.T, bin string, startDrain func(*e2eInstall, *daemon)) {
	in := newE2EInstall(t, bin)
	tokens, ta, _ := twoCallers(t)
	d := in.serve(t, "--token-file", tokens, "--audit-log", "off", "--pool", "0",
		"--drain-timeout", "2m", "--drain-idle", "4s")
	alice := &caller{t, d.url, ta}
	busy := alice.create(`{}`)
	idle := alice.create(`{}`)
	alice.run(busy, "echo kept > f")
	for _, p := range []string{"/readyz", "/livez"} {
		if r, body := get(t, d.url+p); r.StatusCode != 200 {
			t.Fatalf("%s before the drain: %d %s", p, r.StatusCode, body)
		}
	}

	if _, m := alice.do("GET", "/metrics", "", nil); !bytes.Contains(m, []byte("\njaild_draining 0\n")) {
		t.Errorf("metrics before the drain:\n%s", grepLines(m, "jaild_draining"))
	}
	startDrain(in, d)
	eventually(t, "/readyz to fail", func() bool { r, _ := get(t, d.url+"/readyz"); return r.StatusCode == 503 })
	if _, m := alice.do("GET", "/metrics", "", nil); !bytes.Contains(m, []byte("\njaild_draining 1\n")) {
		t.Errorf("metrics while draining:\n%s", grepLines(m, "jaild_draining"))
	}
	if r, body := get(t, d.url+"/livez"); r.StatusCode != 200 {
		t.Errorf("/livez while draining: %d %s", r.StatusCode, body)
	}
	// New work is refused, so that a balancer retries it elsewhere.
	for _, c := range []struct{ path, body string }{
		{"/run", `{"command":"true"}`},
		{"/raw", `{"command":"true"}`},
		{"/sessions", `{}`},
	} {
		req, _ := http.NewRequest("POST", d.url+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+ta)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		body := readAll(resp)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || decodeInto(body, &e) != nil || e.Code != api.CodeDraining {
			t.Errorf("POST %s while draining: %d Retry-After %q %s", c.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	// A session in use keeps being served, with its state, for as long as
	// it is used (calls 200 ms apart, well within the drain's idle time of
	// 4 s even on a slow machine); the idle one goes.
	for i := 0; i < 12; i++ {
		if res := alice.run(busy, "cat f"); res.Stdout != "kept\n" {
			t.Fatalf("call %d in the busy session while draining: %+v", i, res)
		}
		time.Sleep(200 * time.Millisecond)
	}
	eventually(t, "the idle session to go", func() bool {
		code, _ := alice.do("GET", "/sessions/"+idle, "", nil)
		return code == 404
	})
	// Left alone, the busy one goes too, and the daemon exits 0.
	err := recvExit(t, d)
	if err != nil {
		t.Errorf("jaild serve exit after the drain: %v\n%s", err, d.log.Bytes())
	}
}

func recvExit(t *testing.T, d *daemon) error {
	t.Helper()
	select {
	case err := <-d.exited:
		d.exited <- err
		return err
	case <-time.After(time.Minute):
		t.Fatalf("jaild serve did not exit after its sessions went idle\n%s", d.log.Bytes())
		return nil
	}
}

func readAll(resp *http.Response) []byte {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

func decodeInto(data []byte, v any) error { return json.Unmarshal(data, v) }
