package files_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/session/files"
)

// hostile is what a hostile sandbox leaves in /work.
const hostile = `
d sub
f sub/file inside
l sub/out {outside}
l hostetc /etc
l etc /etc
l passwd /etc/passwd
l up ../../..
l canary {canary}
l out {outside}
l loop1 loop2
l loop2 loop1
l inside sub
l absinside /sub/file
l dangling /nowhere/x
h hl sub/file
p fifo
c zero
b disk
`

// TestAttacks: every way a workspace's content could lead the daemon out
// of it, through GET, PUT and DELETE; after each, nothing outside the
// workspace changed. Each case runs on a fresh workspace.
func TestAttacks(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		// check runs on the workspace after the request; the body of
		// the answer is passed.
		check func(t *testing.T, h *host, body string)
		// setup names a link of hostile to remove first.
		setup string
	}{
		// In the workspace's view etc -> /etc is etc -> itself: a loop.
		{name: "GET through etc -> /etc", method: "GET", path: "etc/passwd", status: 400},
		{name: "GET through a symlink to /etc", method: "GET", path: "hostetc/passwd", status: 400},
		{name: "GET through a symlink to /etc, with no loop", method: "GET", path: "hostetc/passwd", status: 404, setup: "etc"},
		{name: "PUT through a symlink to /etc, with no loop", method: "PUT", path: "hostetc/passwd", body: "pwned", status: 404, setup: "etc"},
		{name: "GET a symlink to /etc/passwd", method: "GET", path: "passwd", status: 400},
		{name: "GET a symlink to the canary", method: "GET", path: "canary", status: 404},
		{name: "GET through ../../..", method: "GET", path: "up/canary", status: 404},
		{name: "GET through a symlink to a host dir", method: "GET", path: "out", status: 404},
		{name: "GET ..", method: "GET", path: "../canary", status: 400},
		{name: "GET /../../etc/passwd", method: "GET", path: "/../../etc/passwd", status: 400},
		{name: "GET a symlink loop", method: "GET", path: "loop1", status: 400},
		{name: "GET a fifo", method: "GET", path: "fifo", status: 409},
		{name: "GET a char device", method: "GET", path: "zero", status: 409},
		{name: "GET a block device", method: "GET", path: "disk", status: 409},
		{name: "GET a dangling symlink", method: "GET", path: "dangling", status: 404},
		{name: "GET a relative symlink inside", method: "GET", path: "inside/file", status: 200, check: want("inside")},
		{name: "GET an absolute symlink inside", method: "GET", path: "absinside", status: 200, check: want("inside")},
		{name: "GET a hard link", method: "GET", path: "hl", status: 200, check: want("inside")},
		{name: "GET a file below a file", method: "GET", path: "hl/x", status: 409},
		{name: "GET the root lists without following", method: "GET", path: "", status: 200, check: func(t *testing.T, h *host, body string) {
			var l api.FileList
			if err := json.Unmarshal([]byte(body), &l); err != nil {
				t.Fatal(err)
			}
			got := map[string]api.FileInfo{}
			for _, e := range l.Entries {
				got[e.Name] = e
			}
			if l.Path != "/work" || got["hostetc"].Type != "symlink" || got["hostetc"].Target != "/etc" || got["fifo"].Type != "other" ||
				got["sub"].Type != "dir" || got["hl"].Type != "file" || got["hl"].Size != 6 || got["hl"].Mode != "0644" || len(got) != 16 {
				t.Errorf("listing: %+v", l)
			}
		}},

		{name: "PUT through etc -> /etc", method: "PUT", path: "etc/passwd", body: "pwned", status: 400},
		{name: "PUT through a symlink to /etc", method: "PUT", path: "hostetc/passwd", body: "pwned", status: 400},
		{name: "PUT through a symlink to a host dir", method: "PUT", path: "out/x", body: "pwned", status: 404},
		{name: "PUT through a symlink to a host dir, deeper", method: "PUT", path: "sub/out/a/b", body: "pwned", status: 404},
		{name: "PUT over a symlink to the canary replaces the link", method: "PUT", path: "canary", body: "new", status: 204, check: func(t *testing.T, h *host, _ string) {
			if data, err := os.ReadFile(h.path("canary")); err != nil || string(data) != "new" {
				t.Errorf("canary link: %q, %v", data, err)
			}
		}},
		{name: "PUT through ../../.. stays inside", method: "PUT", path: "up/x", body: "new", status: 204, check: func(t *testing.T, h *host, _ string) {
			if data, err := os.ReadFile(h.path("x")); err != nil || string(data) != "new" {
				t.Errorf("x: %q, %v", data, err)
			}
		}},
		{name: "PUT ..", method: "PUT", path: "sub/../../x", body: "pwned", status: 400},
		{name: "PUT over a fifo", method: "PUT", path: "fifo", body: "new", status: 204},
		{name: "PUT over a device", method: "PUT", path: "zero", body: "new", status: 204},
		{name: "PUT over a hard link keeps the other name", method: "PUT", path: "hl", body: "new", status: 204, check: func(t *testing.T, h *host, _ string) {
			if data, err := os.ReadFile(h.path("sub/file")); err != nil || string(data) != "inside" {
				t.Errorf("sub/file: %q, %v", data, err)
			}
		}},
		{name: "PUT a directory", method: "PUT", path: "sub", body: "x", status: 409},
		{name: "PUT the root", method: "PUT", path: "", body: "x", status: 409},
		{name: "PUT below a file", method: "PUT", path: "hl/x", body: "x", status: 409},
		{name: "PUT through a loop", method: "PUT", path: "loop1/x", body: "x", status: 400},
		{name: "PUT through a dangling symlink", method: "PUT", path: "dangling/x", body: "x", status: 404},

		{name: "DELETE a symlink to /etc removes the link", method: "DELETE", path: "etc", status: 204, check: gone("etc")},
		{name: "DELETE a symlink to /etc, with no loop", method: "DELETE", path: "hostetc/passwd", status: 404, setup: "etc"},
		{name: "DELETE through etc -> /etc", method: "DELETE", path: "etc/passwd", status: 400},
		{name: "DELETE through a symlink to /etc", method: "DELETE", path: "hostetc/passwd", status: 400},
		{name: "DELETE through a symlink to a host dir", method: "DELETE", path: "out/anything", status: 404},
		{name: "DELETE ..", method: "DELETE", path: "../canary", status: 400},
		{name: "DELETE the root", method: "DELETE", path: "", status: 400},
		{name: "DELETE a tree with a symlink out", method: "DELETE", path: "sub", status: 204, check: gone("sub")},
		{name: "DELETE a fifo", method: "DELETE", path: "fifo", status: 204, check: gone("fifo")},
		{name: "DELETE a missing file", method: "DELETE", path: "nothing", status: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newWorkspace(t, 1<<20)
			h.layout(t, hostile)
			if tt.setup != "" {
				if err := os.Remove(h.path(tt.setup)); err != nil {
					t.Fatal(err)
				}
			}
			// The outside directory gets a file, so that a removal
			// through a symlink would show.
			if err := os.WriteFile(h.outside+"/keep", []byte("k"), 0o644); err != nil {
				t.Fatal(err)
			}
			w := doTimeout(t, h.handler(files.Options{}), tt.method, tt.path, []byte(tt.body))
			if w.Code != tt.status {
				t.Errorf("%s %q: %d %s, want %d", tt.method, tt.path, w.Code, w.Body, tt.status)
			}
			if w.Code >= 400 {
				var e api.ErrorResponse
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Error == "" || strings.Contains(e.Error, h.root.Dir) {
					t.Errorf("error body %q: %v (must name /work paths, not host ones)", w.Body, err)
				}
			}
			if tt.check != nil {
				tt.check(t, h, w.Body.String())
			}
			if err := os.Remove(h.outside + "/keep"); err != nil {
				t.Errorf("the file outside: %v", err)
			}
			h.check(t)
		})
	}
}

// doTimeout is do, failing rather than hanging if the handler blocks (on
// a fifo, say).
func doTimeout(t *testing.T, hd http.Handler, method, p string, body []byte, header ...string) *bytesRecorder {
	t.Helper()
	done := make(chan *bytesRecorder, 1)
	go func() {
		w := do(hd, method, p, body, header...)
		done <- &bytesRecorder{Code: w.Code, Body: w.Body, Header: w.Header()}
	}()
	select {
	case w := <-done:
		return w
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %q blocked", method, p)
		return nil
	}
}

type bytesRecorder struct {
	Code   int
	Body   *bytes.Buffer
	Header http.Header
}

func want(content string) func(*testing.T, *host, string) {
	return func(t *testing.T, _ *host, body string) {
		if body != content {
			t.Errorf("body %q, want %q", body, content)
		}
	}
}

func gone(p string) func(*testing.T, *host, string) {
	return func(t *testing.T, h *host, _ string) {
		if _, err := os.Lstat(h.path(p)); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
}

// TestPutGet: a file written through the API is the workspace's (owner,
// mode), reads back, and replaces what was there; parents are made.
func TestPutGet(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	hd := h.handler(files.Options{})
	if w := do(hd, "PUT", "a/b/c.sh", []byte("#!/bin/sh\necho hi\n")); w.Code != 204 {
		t.Fatalf("PUT: %d %s", w.Code, w.Body)
	}
	r := httptestRequest("PUT", "a/b/mode", "x")
	r.URL.RawQuery = "mode=0750"
	w := serve(hd, r)
	if w.Code != 204 {
		t.Fatalf("PUT with a mode: %d %s", w.Code, w.Body)
	}
	for p, mode := range map[string]os.FileMode{"a": os.ModeDir | 0o755, "a/b": os.ModeDir | 0o755, "a/b/c.sh": 0o644, "a/b/mode": 0o750} {
		if uid, gid, m := h.owner(t, p); uid != wsUID || gid != wsGID || m != mode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", p, uid, gid, m, wsUID, wsGID, mode)
		}
	}
	w2 := do(hd, "GET", "/a/b/c.sh", nil)
	if w2.Code != 200 || w2.Body.String() != "#!/bin/sh\necho hi\n" || w2.Header().Get("Content-Length") != "18" {
		t.Errorf("GET: %d %q %v", w2.Code, w2.Body, w2.Header())
	}
	r = httptestRequest("PUT", "a/b/mode", "x")
	r.URL.RawQuery = "mode=99"
	if w := serve(hd, r); w.Code != 400 {
		t.Errorf("PUT with mode 99: %d %s", w.Code, w.Body)
	}
	if ents, _ := os.ReadDir(h.path("a/b")); len(ents) != 2 {
		t.Errorf("a/b holds %d entries (a temp file left?)", len(ents))
	}
	h.check(t)
}

// TestNotTheWorkspace: a Root whose Dir leads to anything but the
// workspace's tmpfs, owned by its sandbox user (as a path through
// /proc/<pid> of a process gone, whose pid is another's, would), is
// neither read nor written.
func TestNotTheWorkspace(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	if w := do(h.handler(files.Options{}), "PUT", "f", []byte("ours")); w.Code != 204 {
		t.Fatalf("PUT in the workspace: %d %s", w.Code, w.Body)
	}
	for name, root := range map[string]files.Root{
		"another owner's tmpfs": {Dir: h.root.Dir, UID: wsUID + 1, GID: wsGID},
		"not a tmpfs":           {Dir: h.outside, UID: 0, GID: 0},
	} {
		hd := files.NewHandler(func(*http.Request) (files.Root, error) { return root, nil }, files.Options{})
		if w := do(hd, "GET", "f", nil); w.Code/100 != 5 || !strings.Contains(w.Body.String(), "is not the workspace") {
			t.Errorf("%s: GET %d %s; want a server error naming it", name, w.Code, w.Body)
		}
		if w := do(hd, "PUT", "g", []byte("x")); w.Code/100 != 5 {
			t.Errorf("%s: PUT %d %s; want a server error", name, w.Code, w.Body)
		}
	}
	if _, err := os.Stat(filepath.Join(h.outside, "g")); !os.IsNotExist(err) {
		t.Errorf("a PUT wrote outside the workspace: %v", err)
	}
	h.check(t)
}

// TestLimits: the quota (507) and MaxUpload (413) refuse a write, and
// leave no partial file behind.
func TestLimits(t *testing.T) {
	h := newWorkspace(t, 64<<10)
	hd := h.handler(files.Options{})
	if w := do(hd, "PUT", "big", bytes.Repeat([]byte("x"), 100<<10)); w.Code != 507 || !strings.Contains(w.Body.String(), `"no_space"`) {
		t.Errorf("PUT past the quota: %d %s", w.Code, w.Body)
	}
	hd = h.handler(files.Options{MaxUpload: 16 << 10})
	if w := do(hd, "PUT", "huge", bytes.Repeat([]byte("x"), 200<<10)); w.Code != 413 {
		t.Errorf("PUT past MaxUpload: %d %s", w.Code, w.Body)
	}
	// Without a Content-Length: the limit is found while reading.
	r := httptestRequest("PUT", "huge", "")
	r.Body = readerOnly{bytes.NewReader(bytes.Repeat([]byte("x"), 200<<10))}
	r.ContentLength = -1
	if w := serve(hd, r); w.Code != 413 {
		t.Errorf("PUT past MaxUpload, chunked: %d %s", w.Code, w.Body)
	}
	if ents, _ := os.ReadDir(h.root.Dir); len(ents) != 0 {
		t.Errorf("workspace holds %d entries after refused writes", len(ents))
	}
	// A tar past the quota: 507 too.
	hd = h.handler(files.Options{})
	if w := do(hd, "PUT", "d", tarOf(t, entry{name: "f", body: strings.Repeat("y", 100<<10)}), "Content-Type", files.TarType); w.Code != 507 {
		t.Errorf("tar past the quota: %d %s", w.Code, w.Body)
	}
	h.check(t)
}

type readerOnly struct{ r *bytes.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r readerOnly) Close() error               { return nil }

// entry is one entry of an archive a test builds.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if e.typ == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLookup: the lookup's error is answered by Options.LookupError, the
// Root's Done is called once per request, and other methods are refused.
func TestLookup(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	done := 0
	lookupErr := errors.New("no such session")
	hd := files.NewHandler(func(r *http.Request) (files.Root, error) {
		if r.Header.Get("X-Session") == "missing" {
			return files.Root{}, lookupErr
		}
		root := h.root
		root.Done = func() { done++ }
		return root, nil
	}, files.Options{LookupError: func(w http.ResponseWriter, r *http.Request, err error) {
		if !errors.Is(err, lookupErr) {
			t.Errorf("LookupError got %v", err)
		}
		w.WriteHeader(http.StatusTeapot)
	}})
	if w := do(hd, "GET", "", nil, "X-Session", "missing"); w.Code != http.StatusTeapot || done != 0 {
		t.Errorf("missing session: %d, done %d", w.Code, done)
	}
	if w := do(hd, "PUT", "f", []byte("x")); w.Code != 204 || done != 1 {
		t.Errorf("PUT: %d, done %d", w.Code, done)
	}
	if w := do(hd, "POST", "f", nil); w.Code != 405 || done != 2 || w.Header().Get("Allow") == "" {
		t.Errorf("POST: %d, done %d", w.Code, done)
	}
	// Without LookupError: the handler's own mapping.
	hd = files.NewHandler(func(*http.Request) (files.Root, error) { return files.Root{}, lookupErr }, files.Options{})
	if w := do(hd, "GET", "", nil); w.Code != 500 {
		t.Errorf("lookup error without LookupError: %d", w.Code)
	}
}
