package files_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"testing"

	"github.com/jaild/jaild/session/files"
)

// BenchmarkHandler: what a transfer costs through the handler, on a tmpfs:
// a 16 MiB file PUT then GET, and a directory of 1000 small files as a
// tar in then out.
func BenchmarkHandler(b *testing.B) {
	h := newWorkspace(b, 256<<20)
	hd := h.handler(files.Options{})
	b.Run("file 16MiB put+get", func(b *testing.B) {
		data := bytes.Repeat([]byte("x"), 16<<20)
		b.SetBytes(2 * int64(len(data)))
		for b.Loop() {
			if w := do(hd, "PUT", "big", data); w.Code != 204 {
				b.Fatalf("PUT: %d %s", w.Code, w.Body)
			}
			if w := do(hd, "GET", "big", nil); w.Code != 200 || w.Body.Len() != len(data) {
				b.Fatalf("GET: %d", w.Code)
			}
		}
	})
	b.Run("tar 1000 files in+out", func(b *testing.B) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := range 1000 {
			body := fmt.Sprintf("file %d\n", i)
			_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/f%d", i%10, i), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte(body))
		}
		_ = tw.Close()
		archive := buf.Bytes()
		for b.Loop() {
			if w := do(hd, "PUT", "tree", archive, "Content-Type", files.TarType); w.Code != 204 {
				b.Fatalf("PUT tar: %d %s", w.Code, w.Body)
			}
			if w := do(hd, "GET", "tree", nil, "Accept", files.TarType); w.Code != 200 {
				b.Fatalf("GET tar: %d", w.Code)
			}
		}
	})
}
