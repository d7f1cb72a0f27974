package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testenv"
)

// TestPidsBudgetE2E: with the sandboxes' pids budget (--total-pids) used
// up by running sandboxes, a run that needs a new sandbox is refused as
// the host being at capacity: 503 capacity with Retry-After, one-shot or in a
// session, never a 500. Once the holders end, runs work again, and nothing
// is left on the host (the installation's check at cleanup).
func TestPidsBudgetE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups (run the tests as root)")
	bin := buildJaild(t)
	in := newE2EInstall(t, bin)
	// Each holder is a sandbox whose init is a sleep: one pid, and no fork
	// that could fail (a shell exits when one does). They are started one
	// at a time until the budget has no room for another start, which
	// takes a few more pids than a sandbox keeps.
	const budget = 24
	// No sandbox is started ahead, for one-shot runs or sessions: every
	// run below needs a new one. (A session's prestart build, made right
	// after the refused start, may find the few pids that start's
	// transient processes had, and serve the session's call.)
	d := in.serve(t, "--audit-log", "off", "--pool", "0", "--session-prestart=false",
		"--total-pids", strconv.Itoa(budget), "--max-concurrent", strconv.Itoa(2*budget))
	c := &caller{t, d.url, ""}

	ctx, cancel := context.WithCancel(context.Background())
	var holders []chan answer
	stopHolders := func() {
		cancel()
		for _, h := range holders {
			<-h
		}
		holders = nil
	}
	defer stopHolders()
	// addHolder starts one more holder and waits until it runs, or is
	// refused (its answer, then).
	addHolder := func() *answer {
		h := make(chan answer, 1)
		holders = append(holders, h)
		running := len(pidsWith(in.marker))
		go func() {
			body := fmt.Sprintf(`{"executable":"sleep","args":[%q],"timeout_seconds":600}`, in.marker)
			req, _ := http.NewRequestWithContext(ctx, "POST", d.url+"/run", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				h <- answer{err: err}
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			h <- answer{resp: resp, status: resp.StatusCode, body: data, err: err}
		}()
		var refused *answer
		eventually(t, fmt.Sprintf("holder %d to run or be refused", len(holders)), func() bool {
			select {
			case a := <-h:
				h <- a
				refused = &a
				return true
			default:
				return len(pidsWith(in.marker)) == running+1
			}
		})
		return refused
	}
	pidsFile := parentPidsFile(t, in)
	// settled is the budget's pids once only the holders hold any: no
	// start's transient processes, no zombie left uncharged.
	settled := func() int {
		var n int
		eventually(t, "the budget to hold only the holders' pids", func() bool {
			cur, _ := os.ReadFile(pidsFile)
			n, _ = strconv.Atoi(strings.TrimSpace(string(cur)))
			return n == len(pidsWith(in.marker))
		})
		return n
	}
	var refused *answer
	for refused == nil {
		if len(holders) == budget {
			t.Fatalf("%d sandboxes run on a budget of %d pids", len(holders), budget)
		}
		refused = addHolder()
	}
	if len(holders) < 2 {
		t.Fatalf("the first sandbox was refused: %d %s", refused.status, refused.body)
	}
	t.Logf("%d holders started, %d of %d pids used; the last start was refused", len(holders), settled(), budget)
	checkBusy := func(what string, a answer) {
		t.Helper()
		var e api.ErrorResponse
		json.Unmarshal(a.body, &e)
		retry := ""
		if a.resp != nil {
			retry = a.resp.Header.Get("Retry-After")
		}
		if n, _ := strconv.Atoi(retry); a.status != 503 || e.Code != api.CodeCapacity || n < 1 || !strings.Contains(e.Error, "pids budget") {
			t.Errorf("%s with the pids budget used up: %d (Retry-After %q) %s, want 503 capacity with Retry-After", what, a.status, retry, a.body)
		}
	}
	checkBusy("the holder that did not fit", *refused)

	id := c.create(`{}`)
	for _, r := range []struct{ path, body string }{
		{"/run", `{"command":"echo hi"}`},
		{"/run", `{"executable":"echo","args":["hi"]}`},
		{"/sessions/" + id + "/run", `{"command":"echo hi"}`},
	} {
		// The refused start lacked pids at its moment, which other
		// starts' transient processes may have taken: a run that finds
		// room after all runs, and another holder takes some, until
		// a run is refused.
		resp, data := post(t, d.url+r.path, r.body)
		for resp.StatusCode == 200 && len(holders) < 2*budget {
			settled()
			addHolder()
			resp, data = post(t, d.url+r.path, r.body)
		}
		checkBusy("POST "+r.path+" "+r.body, answer{resp: resp, status: resp.StatusCode, body: data})
	}

	stopHolders()
	eventually(t, "the holders' processes to end", func() bool { return len(pidsWith(in.marker)) == 0 })
	eventually(t, "the holders' pids to be freed", func() bool {
		cur, _ := os.ReadFile(pidsFile)
		n, err := strconv.Atoi(strings.TrimSpace(string(cur)))
		return err == nil && n <= budget/4
	})
	if res := c.run(id, "echo again"); res.Stdout != "again\n" {
		t.Errorf("a session call once the budget is free: %+v", res)
	}
	resp, data := post(t, d.url+"/run", `{"command":"echo free"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"stdout":"free\n"`) {
		t.Errorf("a run once the budget is free: %d %s", resp.StatusCode, data)
	}
	c.do("DELETE", "/sessions/"+id, "", nil)
}

// parentPidsFile is the pids.current of the installation's parent cgroup,
// the sandboxes' budget.
func parentPidsFile(t *testing.T, in *e2eInstall) string {
	t.Helper()
	var found string
	eventually(t, "the sandboxes' parent cgroup", func() bool {
		for _, d := range testenv.CgroupsNamed(filepath.Base(in.Parent)) {
			if f := filepath.Join(d, "pids.current"); fileExists(f) {
				found = f
				return true
			}
		}
		return false
	})
	return found
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
