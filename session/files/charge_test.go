package files_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/session/files"
)

// testCharge makes a parent cgroup of the test's own, as a daemon's
// worker would, and returns it with its files cgroup. Both are removed at
// cleanup.
func testCharge(t *testing.T) (*cgroup.Parent, *cgroup.Group) {
	t.Helper()
	mode, err := cgroup.Detect()
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "jaild-filestest-" + hex.EncodeToString(b)
	if mode == cgroup.V2 {
		name = "/" + name
	}
	p, err := cgroup.Open(cgroup.Options{Path: name, LockDir: t.TempDir(), Budget: cgroup.Budget{Memory: 1 << 30, Pids: 100, CPUs: 1}})
	if err != nil {
		t.Fatalf("open cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close cgroup: %v", err)
		}
		for _, d := range p.Dirs() {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("cgroup %s left behind", d)
			}
		}
	})
	g, err := p.Files()
	if err != nil {
		t.Fatal(err)
	}
	return p, g
}

// TestChargedWrites: the files the API writes, one PUT or a tar, are
// charged to the sandboxes' parent cgroup, not to the daemon's.
func TestChargedWrites(t *testing.T) {
	const size = 96 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	for _, name := range []string{"a", "b"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: size / 2, Typeflag: tar.TypeReg})
		_, _ = tw.Write(data[:size/2])
	}
	_ = tw.Close()
	for _, tc := range []struct {
		name string
		body []byte
		ct   string
		file string
	}{
		{"put", data, "application/octet-stream", "big"},
		{"tar", archive.Bytes(), files.TarType, "d/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newWorkspace(t, 256<<20)
			parent, g := testCharge(t)
			hd := h.handler(files.Options{Charge: g})
			before, err := parent.MemoryUsage()
			if err != nil {
				t.Fatal(err)
			}
			p := tc.file
			if tc.ct == files.TarType {
				p = "d"
			}
			if w := do(hd, http.MethodPut, p, tc.body, "Content-Type", tc.ct); w.Code != http.StatusNoContent {
				t.Fatalf("PUT: %d %s", w.Code, w.Body)
			}
			after, err := parent.MemoryUsage()
			if err != nil {
				t.Fatal(err)
			}
			if grew := after - before; grew < size*9/10 {
				t.Errorf("the sandboxes' parent cgroup grew by %d MiB for %d MiB written, want about that", grew>>20, size>>20)
			}
			f, err := os.Open(h.path(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, _ := io.ReadAll(f)
			want := data
			if tc.ct == files.TarType {
				want = data[:size/2]
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes, not what was sent", tc.file, len(got))
			}
			if uid, gid, mode := h.owner(t, tc.file); uid != wsUID || gid != wsGID || (tc.ct == files.TarType && mode != 0o755) {
				t.Errorf("%s: owner %d:%d mode %v", tc.file, uid, gid, mode)
			}
			h.check(t)
		})
	}
}

// TestChargedQuota: through the writer a full workspace is still 507, and
// the partial file is removed.
func TestChargedQuota(t *testing.T) {
	h := newWorkspace(t, 4<<20)
	_, g := testCharge(t)
	hd := h.handler(files.Options{Charge: g})
	if w := do(hd, http.MethodPut, "big", make([]byte, 8<<20)); w.Code != http.StatusInsufficientStorage {
		t.Fatalf("PUT past the quota: %d %s", w.Code, w.Body)
	}
	if w := do(hd, http.MethodPut, "small", []byte("ok")); w.Code != http.StatusNoContent {
		t.Fatalf("PUT after: %d %s", w.Code, w.Body)
	}
	ents, _ := os.ReadDir(h.root.Dir)
	if len(ents) != 1 || ents[0].Name() != "small" {
		t.Errorf("workspace holds %v, want only small", ents)
	}
	h.check(t)
}
