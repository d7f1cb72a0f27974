package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// revokeWithin is how soon a command removed from the policy must be
// denied.
const revokeWithin = time.Second

const (
	watchMain = "package sandbox.main\n\nallow if data.sandbox[input.command].allow\n"
	watchDate = "package sandbox.date\n\nallow := true\n"
	watchID   = "package sandbox.id\n\nallow := true\n"
)

// writeSet writes files (name -> content) into a new directory dir.
func writeSet(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for name, content := range files {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

// openWatched opens an engine on dir with live reload and a resolver that
// takes every name for a file in /usr/bin.
func openWatched(t *testing.T, dir string) *Engine {
	t.Helper()
	e, err := Open(Options{Dir: dir, Resolver: ResolverFunc(func(name, _, _ string) (string, string, error) {
		return "/usr/bin/" + name, "0", nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func allowed(e *Engine, cmd string) bool {
	return e.Decide(context.Background(), "", Input{Command: cmd}).Result == Allowed
}

// eventually polls cond until the deadline; what says what was awaited.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// revisionOf is the revision a load of dir has.
func revisionOf(t *testing.T, dir string) string {
	t.Helper()
	s, err := loadDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return s.revision
}

func live(t *testing.T, e *Engine, rev string) func() bool {
	return func() bool {
		st := e.Status()
		return st.Revision == rev && st.Error == ""
	}
}

// TestWatchDirSwapped: after the directory is replaced by rename, the new
// one is live and its later edits are followed.
func TestWatchDirSwapped(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "policy")
	writeSet(t, p, map[string]string{"main.rego": watchMain, "date.rego": watchDate})
	e := openWatched(t, p)
	if !allowed(e, "date") || allowed(e, "id") {
		t.Fatal("the first set is not live")
	}
	writeSet(t, p+".new", map[string]string{"main.rego": watchMain, "date.rego": watchDate, "id.rego": watchID})
	must(t, os.Rename(p, p+".old"))
	must(t, os.Rename(p+".new", p))
	eventually(t, 5*time.Second, "the swapped-in set is live", live(t, e, revisionOf(t, p)))
	if !allowed(e, "id") {
		t.Fatal("id is not allowed by the swapped-in set")
	}
	must(t, os.Remove(filepath.Join(p, "date.rego")))
	eventually(t, revokeWithin, "date denied after its file is removed from the swapped-in directory", func() bool { return !allowed(e, "date") })
	eventually(t, 5*time.Second, "the edited set is live", live(t, e, revisionOf(t, p)))
	// The old directory is no longer followed.
	must(t, os.Remove(filepath.Join(p+".old", "main.rego")))
	time.Sleep(3 * DefaultDebounce)
	if st := e.Status(); st.DenyAll || !allowed(e, "id") {
		t.Fatalf("an edit of the replaced directory was loaded: %+v", st)
	}
}

// TestWatchDirRestored: while the directory is gone the last good set
// stays, with the error reported; a restored directory is live.
func TestWatchDirRestored(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "policy")
	writeSet(t, p, map[string]string{"main.rego": watchMain, "date.rego": watchDate})
	e := openWatched(t, p)
	rev := e.Status().Revision
	must(t, os.RemoveAll(p))
	eventually(t, 5*time.Second, "the missing directory is reported", func() bool { return e.Status().Error != "" })
	if st := e.Status(); st.DenyAll || st.Revision != rev || !allowed(e, "date") {
		t.Fatalf("the last good set is not kept while the directory is missing: %+v", st)
	}
	writeSet(t, p, map[string]string{"main.rego": watchMain, "id.rego": watchID})
	eventually(t, revokeWithin, "date denied by the restored set", func() bool { return !allowed(e, "date") })
	eventually(t, 5*time.Second, "the restored set is live", live(t, e, revisionOf(t, p)))
	if !allowed(e, "id") {
		t.Fatal("id is not allowed by the restored set")
	}
}

// TestWatchConfigMap: the layout of a Kubernetes ConfigMap volume, updated
// as the kubelet does: a new timestamped directory, ..data retargeted by
// renaming a new link over it, links of removed keys deleted.
func TestWatchConfigMap(t *testing.T) {
	p := t.TempDir()
	version := func(ts string, files map[string]string) {
		writeSet(t, filepath.Join(p, ts), files)
		must(t, os.Symlink(ts, filepath.Join(p, "..data_tmp")))
		must(t, os.Rename(filepath.Join(p, "..data_tmp"), filepath.Join(p, "..data")))
		for name := range files {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(p, name)); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
	version("..2026_11_25_01", map[string]string{"main.rego": watchMain, "date.rego": watchDate})
	e := openWatched(t, p)
	if !allowed(e, "date") || e.Status().Files != 2 {
		t.Fatalf("the first version is not live: %+v", e.Status())
	}
	version("..2026_11_25_02", map[string]string{"main.rego": watchMain, "id.rego": watchID})
	must(t, os.Remove(filepath.Join(p, "date.rego")))
	must(t, os.RemoveAll(filepath.Join(p, "..2026_11_25_01")))
	eventually(t, revokeWithin, "date denied after the ..data swap", func() bool { return !allowed(e, "date") })
	eventually(t, 5*time.Second, "the second version is live", live(t, e, revisionOf(t, p)))
	version("..2026_11_25_03", map[string]string{"main.rego": watchMain, "date.rego": watchDate, "id.rego": watchID})
	must(t, os.RemoveAll(filepath.Join(p, "..2026_11_25_02")))
	eventually(t, 5*time.Second, "the third version is live", live(t, e, revisionOf(t, p)))
	if !allowed(e, "date") || !allowed(e, "id") {
		t.Fatal("the third version's commands are not allowed")
	}
}

// TestWatchSymlinkedRoot: the policy directory is a symlink, retargeted
// atomically; the new target is live and its edits are followed.
func TestWatchSymlinkedRoot(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "policy")
	writeSet(t, filepath.Join(base, "v1"), map[string]string{"main.rego": watchMain, "date.rego": watchDate})
	writeSet(t, filepath.Join(base, "v2"), map[string]string{"main.rego": watchMain, "date.rego": watchDate, "id.rego": watchID})
	must(t, os.Symlink("v1", p))
	e := openWatched(t, p)
	if st := e.Status(); st.DenyAll || !allowed(e, "date") {
		t.Fatalf("the symlinked directory does not load: %+v", st)
	}
	must(t, os.Symlink("v2", p+".tmp"))
	must(t, os.Rename(p+".tmp", p))
	eventually(t, 5*time.Second, "the new target is live", live(t, e, revisionOf(t, p)))
	must(t, os.Remove(filepath.Join(base, "v2", "date.rego")))
	eventually(t, revokeWithin, "date denied after its file is removed from the new target", func() bool { return !allowed(e, "date") })
	if !allowed(e, "id") {
		t.Fatal("id is not allowed by the new target")
	}
}
