package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// settle lets the kernel's coarse clock move on, so that a change made
// next gets a timestamp other than the one the cache recorded. The cache
// itself refuses to keep anything this recent (racyWindow); the tests
// turn that off to see entries cached at once.
func settle() { time.Sleep(30 * time.Millisecond) }

// TestResolveCache: a cached resolution is reused while nothing it
// depends on changes, and every change that would make the lookup turn
// out differently is seen.
//
// In a batch (the commands of one decision), the paths a cached answer
// depends on are read once for all of them: each check here first resolves
// another name of the same PATH in the batch, whose reads must not hide a
// change made before the batch began.
func TestResolveCache(t *testing.T) {
	t.Run("alone", func(t *testing.T) { testResolveCache(t, false) })
	t.Run("batch", func(t *testing.T) { testResolveCache(t, true) })
}

func testResolveCache(t *testing.T, batched bool) {
	root := fakeRoot(t)
	r := NewRoot(root)
	r.racy = 0
	cached := func(name string) bool {
		return r.cache.get(resolveKey{name: name}) != nil
	}
	resolve := func(name string) (string, string, error) {
		t.Helper()
		if !batched {
			return r.Resolve(name, "", "")
		}
		b := r.batch()
		b.ResolveIn("", "cat", "", "")
		res, err := b.ResolveIn("", name, "", "")
		return res.Path, res.Hash, err
	}
	settle()
	for _, name := range []string{"date", "sh", "echo", "id", "nosuch"} {
		resolve(name)
		if !cached(name) {
			t.Fatalf("%s not cached", name)
		}
	}
	settle()

	steps := []struct {
		name   string
		change func()
		cmd    string
		want   string // path, or an error's text
	}{
		{"unchanged", func() {}, "date", "/usr/bin/date"},
		{"shadowed earlier in PATH", func() {
			must(t, os.WriteFile(filepath.Join(root, "usr/local/bin/date"), []byte("#!/bin/true local\n"), 0o755))
		}, "date", "/usr/local/bin/date"},
		{"link retargeted", func() {
			must(t, os.Remove(filepath.Join(root, "usr/bin/sh")))
			must(t, os.Symlink("rm", filepath.Join(root, "usr/bin/sh")))
		}, "sh", "/usr/bin/rm"},
		{"no longer executable", func() {
			must(t, os.Chmod(filepath.Join(root, "usr/bin/echo"), 0o644))
		}, "echo", ErrNotFound.Error()},
		{"created", func() {
			must(t, os.WriteFile(filepath.Join(root, "usr/bin/nosuch"), []byte("#!/bin/true\n"), 0o755))
		}, "nosuch", "/usr/bin/nosuch"},
	}
	for _, s := range steps {
		s.change()
		p, _, err := resolve(s.cmd)
		got := p
		if err != nil {
			got = err.Error()
		}
		if got != s.want {
			t.Errorf("%s: Resolve(%s) = %q, want %q", s.name, s.cmd, got, s.want)
		}
		settle()
	}

	// A rewrite in place, same size, is another hash.
	_, h1, _ := resolve("id")
	body := []byte("#!/bin/true ID\n")
	must(t, os.WriteFile(filepath.Join(root, "usr/bin/id"), body, 0o755))
	sum := sha256.Sum256(body)
	if _, h2, _ := resolve("id"); h2 == h1 || h2 != hex.EncodeToString(sum[:]) {
		t.Errorf("hash after a rewrite in place: %s, was %s", h2, h1)
	}

	// What just changed is not cached (racily clean), with the window on.
	r2 := NewRoot(root)
	must(t, os.WriteFile(filepath.Join(root, "usr/bin/fresh"), []byte("#!/bin/true\n"), 0o755))
	if _, _, err := r2.Resolve("fresh", "", ""); err != nil {
		t.Fatal(err)
	}
	if r2.cache.get(resolveKey{name: "fresh"}) != nil {
		t.Error("a resolution of files changed just now was cached")
	}
}

// TestDecisionCache: a repeated input gets the set's earlier answer, marked
// cached in the decision and the log; a policy that reads the clock is
// evaluated every time.
func TestDecisionCache(t *testing.T) {
	root := fakeRoot(t)
	var logBuf bytes.Buffer
	var mu sync.Mutex
	e := openExamples(t, root, Options{DecisionLog: lockedWriter{&logBuf, &mu}})
	ctx := context.Background()
	for _, in := range []Input{
		{Command: "date"},
		{Command: "date", Args: []string{"-u"}},
		shellInput("date | echo ok"),
		shellInput("echo ok; rm -rf /"),
	} {
		first := e.Decide(ctx, "", in)
		again := e.Decide(ctx, "", in)
		if first.Cached || !again.Cached || first.Allow != again.Allow || first.Message != again.Message || first.Result != again.Result {
			t.Errorf("%+v: first %+v, again %+v", in, first, again)
		}
	}
	// Another caller is another input.
	if d := e.Decide(ctx, "", Input{Command: "date", Caller: "other"}); d.Cached {
		t.Error("a different input was answered from the cache")
	}
	mu.Lock()
	if n := strings.Count(logBuf.String(), `"cached":true`); n != 4 {
		t.Errorf("%d cached decisions logged, want 4:\n%s", n, logBuf.String())
	}
	mu.Unlock()

	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte(`package sandbox.main

allow if time.now_ns() > 0
`), 0o644))
	clock := openExamples(t, root, Options{Dir: dir})
	for range 2 {
		if d := clock.Decide(ctx, "", Input{Command: "date"}); !d.Allow || d.Cached {
			t.Errorf("a clock-reading policy: %+v", d)
		}
	}
	if st := clock.cur.Load(); st.cache != nil || st.nondet != "time.now_ns" {
		t.Errorf("set reading the clock: cache %v, nondeterministic %q", st.cache != nil, st.nondet)
	}
}

// TestNondeterministic finds calls of nondeterministic builtins wherever
// they are written.
func TestNondeterministic(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`allow if time.now_ns() > 0`, "time.now_ns"},
		{`allow if { x := rand.intn("k", 10); x >= 0 }`, "rand.intn"},
		{`allow if count([uuid.rfc4122("a")]) == 1`, "uuid.rfc4122"},
		{`f(x) := http.send({"method": "GET", "url": x})
allow if f("http://127.0.0.1:1")`, "http.send"},
		{`allow if count(input.args) == 0`, ""},
	} {
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, "main.rego"), []byte("package sandbox.main\n\n"+tc.body+"\n"), 0o644))
		s, err := loadDir(context.Background(), dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := nondeterministic(s.modules); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}
