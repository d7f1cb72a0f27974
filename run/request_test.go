package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/egress"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// specsJail makes workspaces that are one recorder: their runs note the
// spec they are given and end at once.
type specsJail struct{ ws *specsWorkspace }

func (j specsJail) NewWorkspace(context.Context, int64, bool, *box.Limits) (session.Workspace, error) {
	return j.ws, nil
}

// specLog notes the specs that reach the end of the chain.
type specLog struct {
	mu    sync.Mutex
	specs []jail.Spec
}

func (l *specLog) note(s *jail.Spec) {
	l.mu.Lock()
	l.specs = append(l.specs, *s)
	l.mu.Unlock()
}

func (l *specLog) last() jail.Spec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.specs[len(l.specs)-1]
}

type specsWorkspace struct {
	dir string
	specLog
}

func (w *specsWorkspace) Dir() string                   { return w.dir }
func (*specsWorkspace) HostIDs() (int, int)             { return 0, 0 }
func (*specsWorkspace) Size() int64                     { return 1 << 20 }
func (*specsWorkspace) Used() (int64, error)            { return 0, nil }
func (*specsWorkspace) Close() error                    { return nil }
func (*specsWorkspace) Lost() <-chan struct{}           { return nil }
func (*specsWorkspace) TakeProxyListener() net.Listener { return nil }
func (w *specsWorkspace) Run(_ context.Context, s *jail.Spec) (*box.Result, error) {
	w.note(s)
	return &box.Result{ID: "ws"}, nil
}

// specsBase is the jail of one-shot runs: it notes the specs it is given.
type specsBase struct{ specLog }

func (b *specsBase) Run(_ context.Context, s *jail.Spec) (*box.Result, error) {
	b.note(s)
	return &box.Result{ID: "base"}, nil
}

// requestChain is a chain with every link that fills something in: the
// maxima (limits, timeout, output cap), egress by default, sessions (their
// limits, a job's timeout), admission, audit, metrics and a policy that
// allows a call in a session only as a background start or in /tmp, so
// that what the policy is told of the path shows, and denies every change
// of a session's environment.
type requestChain struct {
	r        run.Runner
	base     *specsBase
	ws       *specsWorkspace
	sessions *session.Manager
	sess     *session.Session
	// policy and log are the chain's, for run.Sessions beside it.
	policy *policy.Engine
	log    *run.AuditLog
	mu     sync.Mutex // guards audit, which the chain writes to
	audit  bytes.Buffer
}

func (c *requestChain) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.audit.Write(p)
}

// records are the audit records written so far.
func (c *requestChain) records(t *testing.T) []api.AuditRecord {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var recs []api.AuditRecord
	for line := range strings.Lines(c.audit.String()) {
		var rec api.AuditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

const sessionMemory = 32 << 20

func newRequestChain(t *testing.T) *requestChain {
	t.Helper()
	c := &requestChain{base: &specsBase{}, ws: &specsWorkspace{dir: t.TempDir()}}
	m, err := session.New(specsJail{c.ws}, session.Config{MaxJobs: 64, MaxJobTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	c.sessions = m
	if c.sess, err = m.Create(context.Background(), session.Options{Owner: caller.FromToken("a"), Limits: box.Limits{Memory: sessionMemory}}); err != nil {
		t.Fatal(err)
	}
	allow, err := egress.ParsePatterns([]string{"*.pypi.org:443"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules := "package sandbox.main\n\nallow if not input.session_id\n\nallow if input.background == true\n\nallow if input.cwd == \"/tmp\"\n" +
		"\ndefault allow_action := false\n\nallow_action if input.action != \"session.env\"\n"
	if err := os.WriteFile(filepath.Join(dir, "main.rego"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Open(policy.Options{Dir: dir, NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	c.policy, c.log = pol, run.NewAuditLog(c, run.AuditOptions{})
	c.r, err = run.Chain(c.base, run.ChainOptions{
		Max:       run.Maxima{Limits: box.Limits{Memory: 64 << 20}, Timeout: time.Minute},
		Admission: run.AdmitOptions{MaxConcurrent: 4, MaxQueue: 64, MaxWait: time.Minute},
		Audit:     c.log,
		Policy:    pol,
		Metrics:   run.NewMetrics(),
		Sessions:  m,
		Egress:    run.EgressOptions{Proxy: egress.New(egress.Config{Allow: allow}), Default: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// request is a request that leaves everything the chain fills in unset.
// Each call builds a new one, equal to the others.
func (c *requestChain) request(sessionID string, keep *run.OutputHold) run.Request {
	return run.Request{
		Spec:      &jail.Spec{Command: box.Command{Args: []string{"echo", "hi"}, Env: []string{"A=1"}}},
		Caller:    "a",
		Owner:     caller.FromToken("a"),
		RequestID: "r1",
		FrontEnd:  "run",
		SessionID: sessionID,
		// The hold is the front end's, for the chain to keep memory in:
		// the same one in both requests compared.
		KeepOutput: keep,
	}
}

// TestChainLeavesRequestAlone: the chain fills in limits, timeout, output
// cap and egress on the way to the jail or the session, and the caller's
// request, its spec included, is as it was; Start returns a job's id.
func TestChainLeavesRequestAlone(t *testing.T) {
	c := newRequestChain(t)
	ctx := context.Background()
	var hold run.OutputHold
	defer hold.Release()

	t.Run("run", func(t *testing.T) {
		req := c.request("", &hold)
		res, err := c.r.Run(ctx, req)
		if err != nil || res == nil || res.ID != "base" {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		got := c.base.last()
		if got.Limits.Memory != 64<<20 || got.Timeout != box.DefaultTimeout || got.MaxOutput != box.DefaultMaxOutput || got.Egress == nil {
			t.Errorf("the jail got limits %+v, timeout %v, output %d, egress %v: want them filled in", got.Limits, got.Timeout, got.MaxOutput, got.Egress)
		}
		if want := c.request("", &hold); !reflect.DeepEqual(req, want) {
			t.Errorf("request after Run:\n%+v\nspec %+v\nwant\n%+v\nspec %+v", req, *req.Spec, want, *want.Spec)
		}
	})

	t.Run("run in a session", func(t *testing.T) {
		req := c.request(c.sess.ID(), &hold)
		req.Spec.Dir = "/tmp"
		res, err := c.r.Run(ctx, req)
		if err != nil || res == nil || res.ID != "ws" {
			t.Fatalf("Run in a session: %+v, %v", res, err)
		}
		if got := c.ws.last(); got.Limits.Memory != sessionMemory || got.Timeout != box.DefaultTimeout || got.Egress != nil {
			t.Errorf("the call got limits %+v, timeout %v, egress %v: want the session's memory and the default timeout", got.Limits, got.Timeout, got.Egress)
		}
		want := c.request(c.sess.ID(), &hold)
		want.Spec.Dir = "/tmp"
		if !reflect.DeepEqual(req, want) {
			t.Errorf("request after Run:\n%+v\nspec %+v\nwant\n%+v\nspec %+v", req, *req.Spec, want, *want.Spec)
		}
	})

	t.Run("run in a session denied", func(t *testing.T) {
		// The policy allows this request as a background start only.
		req := c.request(c.sess.ID(), &hold)
		if _, err := c.r.Run(ctx, req); !errors.Is(err, api.ErrDenied) {
			t.Fatalf("Run in a session: %v, want denied by the policy", err)
		}
		if want := c.request(c.sess.ID(), &hold); !reflect.DeepEqual(req, want) {
			t.Errorf("request after Run:\n%+v\nspec %+v\nwant\n%+v\nspec %+v", req, *req.Spec, want, *want.Spec)
		}
	})

	t.Run("start", func(t *testing.T) {
		req := c.request(c.sess.ID(), &hold)
		id, err := c.r.Start(ctx, req)
		if err != nil || id == "" {
			t.Fatalf("Start: %q, %v", id, err)
		}
		if err := c.sess.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		st, err := c.sess.Job(id, session.Offsets{})
		if err != nil || st.Running || st.Result == nil || st.Result.ID != "ws" {
			t.Fatalf("job %s: %+v, %v", id, st, err)
		}
		got := c.ws.last()
		if got.Limits.Memory != sessionMemory || got.Timeout != c.sessions.MaxJobTimeout() || got.Egress != nil {
			t.Errorf("the job got limits %+v, timeout %v, egress %v: want the session's memory and the job timeout", got.Limits, got.Timeout, got.Egress)
		}
		if want := c.request(c.sess.ID(), &hold); !reflect.DeepEqual(req, want) {
			t.Errorf("request after Start:\n%+v\nspec %+v\nwant\n%+v\nspec %+v", req, *req.Spec, want, *want.Spec)
		}
		recs := c.records(t)
		if rec := recs[len(recs)-1]; rec.Verdict != api.VerdictStarted || rec.JobID != id || rec.SessionID != c.sess.ID() {
			t.Errorf("audit record of the start: %+v", rec)
		}
	})

	t.Run("start refused", func(t *testing.T) {
		for _, req := range []run.Request{c.request("", nil), c.request("no-such-session", nil)} {
			id, err := c.r.Start(ctx, req)
			if err == nil || id != "" {
				t.Errorf("Start in session %q: %q, %v, want an error and no job", req.SessionID, id, err)
			}
		}
	})
}

// TestChainRequestReuse runs one request value through the chain many times
// at once, one-shot and as background starts: under the race detector, a
// link that wrote to the request or its spec would be caught, and each run
// must still get its own effective spec.
func TestChainRequestReuse(t *testing.T) {
	c := newRequestChain(t)
	ctx := context.Background()
	var hold run.OutputHold
	defer hold.Release()
	oneShot := c.request("", &hold)
	start := c.request(c.sess.ID(), nil)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 8 {
		wg.Go(func() {
			if _, err := c.r.Run(ctx, oneShot); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			id, err := c.r.Start(ctx, start)
			if err == nil {
				err = c.sess.Wait(ctx, id)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := c.request("", &hold); !reflect.DeepEqual(oneShot, want) {
		t.Errorf("one-shot request after the runs: %+v, spec %+v", oneShot, *oneShot.Spec)
	}
	if want := c.request(c.sess.ID(), nil); !reflect.DeepEqual(start, want) {
		t.Errorf("background request after the starts: %+v, spec %+v", start, *start.Spec)
	}
	for _, s := range c.base.specs {
		if s.Egress == nil || s.Limits.Memory != 64<<20 {
			t.Errorf("a run got egress %v, memory %d", s.Egress, s.Limits.Memory)
		}
	}
	for _, s := range c.ws.specs {
		if s.Limits.Memory != sessionMemory || s.Timeout != c.sessions.MaxJobTimeout() {
			t.Errorf("a job got memory %d, timeout %v", s.Limits.Memory, s.Timeout)
		}
	}
	if len(c.base.specs) != 8 || len(c.ws.specs) != 8 {
		t.Errorf("%d runs and %d jobs reached the end of the chain, want 8 each", len(c.base.specs), len(c.ws.specs))
	}
}

// TestPolicyCanceled: a request whose caller is gone when the policy
// decides is canceled, not denied: the evaluation it cut short decided
// nothing. A run says so in its error and audit record, nothing is built
// for it; a session's environment change is not audited as a refusal. The
// same requests with their callers there are denied.
func TestPolicyCanceled(t *testing.T) {
	c := newRequestChain(t)
	var hold run.OutputHold
	defer hold.Release()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	// The policy allows this one-shot; its caller is gone.
	if _, err := c.r.Run(canceled, c.request("", &hold)); !errors.Is(err, context.Canceled) || errors.Is(err, api.ErrDenied) {
		t.Fatalf("Run: %v, want canceled", err)
	}
	recs := c.records(t)
	if len(recs) != 1 || recs[0].Verdict != api.VerdictCanceled {
		t.Fatalf("audit records %+v, want one canceled", recs)
	}
	if n := len(c.base.specs); n != 0 {
		t.Fatalf("the jail got %d runs", n)
	}

	// The policy denies every change of a session's environment.
	s := &run.Sessions{Manager: c.sessions, Audit: c.log, Policy: c.policy}
	env := func() *run.SessionEnvRequest {
		return &run.SessionEnvRequest{Caller: "a", RequestID: "r2", Session: c.sess, Set: map[string]string{"X": "1"}}
	}
	if err := s.SetEnv(canceled, env()); !errors.Is(err, context.Canceled) || errors.Is(err, api.ErrDenied) {
		t.Fatalf("SetEnv: %v, want canceled", err)
	}
	if recs := c.records(t); len(recs) != 1 {
		t.Fatalf("audit records %+v: the canceled change was recorded", recs)
	}
	if err := s.SetEnv(context.Background(), env()); !errors.Is(err, api.ErrDenied) {
		t.Fatalf("SetEnv: %v, want denied", err)
	}
	if recs := c.records(t); len(recs) != 2 || recs[1].Verdict == api.VerdictCanceled {
		t.Fatalf("audit records %+v, want the denial recorded", recs)
	}
}
