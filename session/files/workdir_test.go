package files_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/session/files"
)

// TestWorkDirNames: with Root.WorkDir set, listings and errors name paths
// as the sandbox sees them there; a request's path stays relative to it.
func TestWorkDirNames(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	h.root.WorkDir = "/workspace"
	hd := h.handler(files.Options{})
	if w := do(hd, "PUT", "sub/f", []byte("x")); w.Code != 204 {
		t.Fatalf("PUT sub/f: %d %s", w.Code, w.Body)
	}
	for _, p := range []string{"", "/"} {
		w := do(hd, "GET", p, nil)
		var l api.FileList
		if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || w.Code != 200 || l.Path != "/workspace" {
			t.Errorf("GET %q: %d %s", p, w.Code, w.Body)
		}
	}
	w := do(hd, "GET", "sub", nil)
	var l api.FileList
	if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || l.Path != "/workspace/sub" || len(l.Entries) != 1 {
		t.Errorf("GET sub: %d %s", w.Code, w.Body)
	}
	if w := do(hd, "GET", "nope", nil); w.Code != 404 || !strings.Contains(w.Body.String(), "/workspace/nope") || strings.Contains(w.Body.String(), "/work/") {
		t.Errorf("GET nope: %d %s; want 404 naming /workspace/nope", w.Code, w.Body)
	}
	if w := do(hd, "DELETE", "", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "/workspace") {
		t.Errorf("DELETE the root: %d %s", w.Code, w.Body)
	}
	h.check(t)
}
