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
	d := in.serve(t, "--audit-log", "off", "--pool", "0", "--total-pids", strconv.Itoa(budget), "--max-concurrent", strconv.Itoa(2*budget))
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
	var refused *answer
	for i := 0; refused == nil; i++ {
		if i == budget {
			t.Fatalf("%d sandboxes run on a budget of %d pids", i, budget)
		}
		h := make(chan answer, 1)
		holders = append(holders, h)
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
		eventually(t, fmt.Sprintf("holder %d to run or be refused", i+1), func() bool {
			select {
			case a := <-h:
				h <- a
				refused = &a
				return true
			default:
				return len(pidsWith(in.marker)) == i+1
			}
		})
	}
	if len(holders) < 2 {
		t.Fatalf("the first sandbox was refused: %d %s", refused.status, refused.body)
	}
	pidsFile := parentPidsFile(t, in)
	cur, _ := os.ReadFile(pidsFile)
	t.Logf("%d sandboxes hold %s of %d pids; the next start was refused", len(holders)-1, strings.TrimSpace(string(cur)), budget)
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

	// Made with the budget used up: it has no sandbox started ahead.
	id := c.create(`{}`)
	for _, r := range []struct{ path, body string }{
		{"/run", `{"command":"echo hi"}`},
		{"/run", `{"executable":"echo","args":["hi"]}`},
		{"/sessions/" + id + "/run", `{"command":"echo hi"}`},
	} {
		resp, data := post(t, d.url+r.path, r.body)
		checkBusy("POST "+r.path+" "+r.body, answer{resp: resp, status: resp.StatusCode, body: data})
	}

	stopHolders()
	eventually(t, "the holders' processes to end", func() bool { return len(pidsWith(in.marker)) == 0 })
	// What stays is the session's sandbox started ahead for its next call.
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
