package files_test

import (
	"archive/tar"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/session/files"
)

// TestSparse: a download may not produce more than the workspace can
// hold: a sparse file (truncate -s) larger than the workspace, or a tree
// whose files add up to more, is refused with 409 before anything is sent.
func TestSparse(t *testing.T) {
	const size = 4 << 20
	for _, tc := range []struct {
		name  string
		files map[string]int64 // apparent sizes
		get   string
		tar   bool
		want  int
	}{
		{"file larger than the workspace", map[string]int64{"s": 64 << 20}, "s", false, http.StatusConflict},
		{"a petabyte", map[string]int64{"s": 1 << 50}, "s", false, http.StatusConflict},
		{"tar of one", map[string]int64{"d/s": 1 << 50}, "d", true, http.StatusConflict},
		{"tar adding up", map[string]int64{"d/a": 3 << 20, "d/b": 3 << 20}, "d", true, http.StatusConflict},
		{"sparse within the size", map[string]int64{"s": 3 << 20}, "s", false, http.StatusOK},
		{"tar within the size", map[string]int64{"d/a": 1 << 20, "d/b": 1 << 20}, "d", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newWorkspace(t, size)
			h.root.Size = size
			_ = os.Mkdir(h.path("d"), 0o755)
			for p, n := range tc.files {
				f, err := os.Create(h.path(p))
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(n); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			var hdr []string
			if tc.tar {
				hdr = []string{"Accept", files.TarType}
			}
			w := do(h.handler(files.Options{}), http.MethodGet, tc.get, nil, hdr...)
			if w.Code != tc.want {
				t.Fatalf("GET %s: %d, want %d (%d bytes)", tc.get, w.Code, tc.want, w.Body.Len())
			}
			if tc.want == http.StatusConflict && !strings.Contains(w.Body.String(), "larger than the workspace") {
				t.Errorf("answer: %s", w.Body)
			}
			if tc.want == http.StatusOK && tc.tar {
				var names []string
				tr := tar.NewReader(w.Body)
				for {
					hdr, err := tr.Next()
					if err != nil {
						break
					}
					names = append(names, hdr.Name)
				}
				if len(names) != len(tc.files) {
					t.Errorf("archive holds %v, want %d files", names, len(tc.files))
				}
			}
		})
	}
}
