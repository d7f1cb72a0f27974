package files_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/jaild/jaild/session/files"
)

// TestUntarAttacks: archives that try to write outside the directory they
// are unpacked into, or to make devices, are refused (or, for absolute
// names, kept inside); nothing outside the workspace changes.
func TestUntarAttacks(t *testing.T) {
	tests := []struct {
		name    string
		dest    string
		entries []entry
		status  int
		check   func(t *testing.T, h *host)
	}{
		{name: "dot dot", entries: []entry{{name: "../x", body: "pwned"}}, status: 400},
		{name: "dot dot deep", entries: []entry{{name: "a/../../../x", body: "pwned"}}, status: 400},
		{name: "absolute name is kept inside", dest: "d", entries: []entry{{name: "/etc/passwd", body: "mine"}}, status: 204, check: func(t *testing.T, h *host) {
			if data, err := os.ReadFile(h.path("d/etc/passwd")); err != nil || string(data) != "mine" {
				t.Errorf("d/etc/passwd: %q, %v", data, err)
			}
		}},
		{name: "symlink then file through it", entries: []entry{
			{name: "x", typ: tar.TypeSymlink, link: "{outside}"},
			{name: "x/f", body: "pwned"},
		}, status: 400},
		{name: "relative symlink up then file", entries: []entry{
			{name: "x", typ: tar.TypeSymlink, link: "../../.."},
			{name: "x/canary", body: "pwned"},
		}, status: 400},
		{name: "symlink to /etc then passwd", entries: []entry{
			{name: "x", typ: tar.TypeSymlink, link: "/etc"},
			{name: "x/passwd", body: "pwned"},
		}, status: 400},
		{name: "through a symlink already there", entries: []entry{{name: "etc/passwd", body: "pwned"}}, status: 400},
		// The destination is looked up like any path: etc -> /etc is
		// <workspace>/etc, the link itself: a loop.
		{name: "into a symlinked dest", dest: "etc", entries: []entry{{name: "passwd", body: "mine"}}, status: 400},
		{name: "symlink over a file, then the file", entries: []entry{
			{name: "f", body: "one"},
			{name: "f", typ: tar.TypeSymlink, link: "{canary}"},
			{name: "f", body: "two"},
		}, status: 204, check: func(t *testing.T, h *host) {
			if data, err := os.ReadFile(h.path("f")); err != nil || string(data) != "two" {
				t.Errorf("f: %q, %v", data, err)
			}
		}},
		{name: "hard link to an outside name", entries: []entry{{name: "l", typ: tar.TypeLink, link: "{canary}"}}, status: 400},
		{name: "hard link up", entries: []entry{{name: "l", typ: tar.TypeLink, link: "../canary"}}, status: 400},
		{name: "hard link to a workspace file not in the archive", entries: []entry{{name: "l", typ: tar.TypeLink, link: "sub/file"}}, status: 400},
		{name: "hard link to a symlink of the archive", entries: []entry{
			{name: "s", typ: tar.TypeSymlink, link: "/etc/passwd"},
			{name: "l", typ: tar.TypeLink, link: "s"},
		}, status: 400},
		{name: "hard link inside", entries: []entry{
			{name: "a/f", body: "data"},
			{name: "b/l", typ: tar.TypeLink, link: "a/f"},
		}, status: 204, check: func(t *testing.T, h *host) {
			a, _ := os.Stat(h.path("a/f"))
			b, err := os.Stat(h.path("b/l"))
			if err != nil || !os.SameFile(a, b) {
				t.Errorf("b/l is not a/f: %v", err)
			}
		}},
		{name: "char device", entries: []entry{{name: "zero", typ: tar.TypeChar}}, status: 400},
		{name: "block device", entries: []entry{{name: "sda", typ: tar.TypeBlock}}, status: 400},
		{name: "fifo", entries: []entry{{name: "p", typ: tar.TypeFifo}}, status: 400},
		{name: "file over a directory", entries: []entry{{name: "sub", body: "x"}}, status: 409},
		{name: "setuid bit dropped", entries: []entry{{name: "s", body: "x", mode: 0o4755}}, status: 204, check: func(t *testing.T, h *host) {
			if uid, _, m := h.owner(t, "s"); m != 0o755 || uid != wsUID {
				t.Errorf("s: %v uid %d", m, uid)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newWorkspace(t, 1<<20)
			h.layout(t, "d sub\nf sub/file inside\nl etc /etc")
			r := strings.NewReplacer("{outside}", h.outside, "{canary}", h.canary)
			for i := range tt.entries {
				tt.entries[i].link = r.Replace(tt.entries[i].link)
			}
			w := doTimeout(t, h.handler(files.Options{}), "PUT", tt.dest, tarOf(t, tt.entries...), "Content-Type", files.TarType)
			if w.Code != tt.status {
				t.Errorf("PUT: %d %s, want %d", w.Code, w.Body, tt.status)
			}
			if tt.check != nil {
				tt.check(t, h)
			}
			h.check(t)
		})
	}
}

// TestUntarLimits: entry count, garbage, a cut-off archive.
func TestUntarLimits(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	hd := h.handler(files.Options{MaxEntries: 3})
	four := tarOf(t, entry{name: "a"}, entry{name: "b"}, entry{name: "c"}, entry{name: "d"})
	if w := do(hd, "PUT", "", four, "Content-Type", files.TarType); w.Code != 413 {
		t.Errorf("4 entries, max 3: %d %s", w.Code, w.Body)
	}
	if w := do(hd, "PUT", "g", []byte(strings.Repeat("garbage ", 200)), "Content-Type", files.TarType); w.Code != 400 {
		t.Errorf("garbage: %d %s", w.Code, w.Body)
	}
	cut := tarOf(t, entry{name: "f", body: strings.Repeat("z", 4000)})
	if w := do(hd, "PUT", "cut", cut[:1500], "Content-Type", files.TarType); w.Code != 400 {
		t.Errorf("cut-off archive: %d %s", w.Code, w.Body)
	}
	h.check(t)
}

// TestTarRoundTrip: a tree with a symlink out, a hard link, a fifo and a
// device comes out as symlinks and files (the link's target not
// followed, the fifo and device skipped) and unpacks again the same.
func TestTarRoundTrip(t *testing.T) {
	h := newWorkspace(t, 1<<20)
	h.layout(t, `
d src
d src/sub
f src/sub/a hello
h src/b src/sub/a
l src/etc /etc
l src/rel sub/a
p src/fifo
c src/zero
`)
	hd := h.handler(files.Options{})
	w := doTimeout(t, hd, "GET", "src", nil, "Accept", files.TarType)
	if w.Code != 200 || w.Header.Get("Content-Type") != files.TarType {
		t.Fatalf("GET tar: %d %v %s", w.Code, w.Header, w.Body)
	}
	archive := w.Body.Bytes()
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[hdr.Name] = string(hdr.Typeflag) + ":" + hdr.Linkname + ":" + string(data)
	}
	want := map[string]string{
		"b":     "0::hello",
		"etc":   "2:/etc:",
		"rel":   "2:sub/a:",
		"sub/":  "5::",
		"sub/a": "1:b:",
	}
	if len(got) != len(want) {
		t.Errorf("archive: %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("entry %s: %q, want %q", k, got[k], v)
		}
	}
	if w := do(hd, "PUT", "copy", archive, "Content-Type", files.TarType); w.Code != 204 {
		t.Fatalf("PUT tar: %d %s", w.Code, w.Body)
	}
	if data, err := os.ReadFile(h.path("copy/sub/a")); err != nil || string(data) != "hello" {
		t.Errorf("copy/sub/a: %q %v", data, err)
	}
	if orig, err := os.Stat(h.path("src/sub/a")); err != nil {
		t.Fatal(err)
	} else if st, err := os.Stat(h.path("copy/sub/a")); err != nil || !st.ModTime().Equal(orig.ModTime()) {
		t.Errorf("copy/sub/a's time %v, want the archive's %v", st.ModTime(), orig.ModTime())
	}
	if target, err := os.Readlink(h.path("copy/etc")); err != nil || target != "/etc" {
		t.Errorf("copy/etc: %q %v", target, err)
	}
	a, _ := os.Stat(h.path("copy/sub/a"))
	b, _ := os.Stat(h.path("copy/b"))
	if !os.SameFile(a, b) || a.Sys().(*syscall.Stat_t).Uid != wsUID {
		t.Errorf("copy/b is not a hard link of copy/sub/a owned by %d", wsUID)
	}
	// A file, asked for as a tar, is its bytes.
	if w := do(hd, "GET", "src/b", nil, "Accept", files.TarType); w.Code != 200 || w.Body.String() != "hello" {
		t.Errorf("GET a file with Accept tar: %d %q", w.Code, w.Body)
	}
	h.check(t)
}
