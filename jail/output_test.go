package jail

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jaild/jaild/box"
)

// TestCaptureBound checks that the kept output, marker included, never
// exceeds the cap, and that it is the stream's head and tail around a marker
// that counts exactly what is missing.
func TestCaptureBound(t *testing.T) {
	var stream bytes.Buffer
	for i := 0; stream.Len() < 200000; i++ {
		fmt.Fprintf(&stream, "line %d\n", i)
	}
	data := stream.Bytes()
	for _, max := range []int64{1, 10, 40, 100, 101, 1000, 4096, 65536, int64(len(data)) - 1} {
		for _, chunk := range []int{1, 7, 4096, len(data)} {
			t.Run(fmt.Sprintf("max%d/chunk%d", max, chunk), func(t *testing.T) {
				c := newCapture(max, nil)
				for p := data; len(p) > 0; {
					n := min(chunk, len(p))
					c.Write(p[:n])
					p = p[n:]
				}
				if !c.truncated() || c.total != int64(len(data)) {
					t.Fatalf("truncated %v total %d", c.truncated(), c.total)
				}
				got := c.String()
				if int64(len(got)) > max {
					t.Fatalf("kept %d bytes, cap %d", len(got), max)
				}
				i := strings.Index(got, "\n[... jaild: ")
				if i < 0 {
					// Only a cap too small for the marker keeps no marker.
					if int64(len(box.Elide(int64(len(data))))) <= max || !bytes.HasPrefix(data, []byte(got)) {
						t.Fatalf("no marker in %q", got)
					}
					return
				}
				head := got[:i]
				var elided int64
				rest := got[i:]
				if _, err := fmt.Sscanf(rest, "\n[... jaild: %d bytes of output elided ...]\n", &elided); err != nil {
					t.Fatalf("marker: %v in %q", err, rest)
				}
				tail := rest[len(box.Elide(elided)):]
				if !bytes.HasPrefix(data, []byte(head)) || !bytes.HasSuffix(data, []byte(tail)) {
					t.Fatalf("head %q / tail %q not the stream's", head, tail)
				}
				if want := int64(len(data) - len(head) - len(tail)); elided != want {
					t.Fatalf("marker says %d elided, %d are", elided, want)
				}
				if int64(len(got)) != max {
					t.Errorf("kept %d bytes of a cap of %d: more fits", len(got), max)
				}
			})
		}
	}
}

func TestCaptureUnderCap(t *testing.T) {
	c := newCapture(100, nil)
	c.Write([]byte("hello "))
	c.Write([]byte("world"))
	if c.truncated() || c.String() != "hello world" {
		t.Fatalf("got %q truncated=%v", c.String(), c.truncated())
	}
	if c.buf != nil {
		t.Error("String kept its buffer")
	}
}

// TestCaptureMemory checks that the buffers never hold more than the cap,
// however the stream is cut into writes.
func TestCaptureMemory(t *testing.T) {
	const max = 1 << 20
	c := newCapture(max, nil)
	chunk := bytes.Repeat([]byte{'x'}, 3<<10)
	for range 1000 {
		c.Write(chunk)
		if held := cap(c.buf); held > max {
			t.Fatalf("buffers hold %d bytes, cap %d", held, max)
		}
	}
}

// TestCaptureCutsOnCharacters: head and tail around the marker are whole
// UTF-8 characters, the kept bytes still fill the cap but for the pieces of
// a cut character, and the marker counts exactly what is missing.
func TestCaptureCutsOnCharacters(t *testing.T) {
	for _, unit := range []string{"é", "€", "😀", "aé€😀"} {
		data := []byte(strings.Repeat(unit, 100000/len(unit)))
		for _, max := range []int64{60, 61, 62, 63, 1001, 30000, 30001} {
			for _, chunk := range []int{1, 3, 4096} {
				c := newCapture(max, nil)
				for p := data; len(p) > 0; {
					n := min(chunk, len(p))
					c.Write(p[:n])
					p = p[n:]
				}
				got := c.String()
				name := fmt.Sprintf("%q max %d chunk %d", unit, max, chunk)
				if !utf8.ValidString(got) {
					t.Errorf("%s: a character was cut: %q", name, got)
				}
				if int64(len(got)) > max || int64(len(got)) < max-2*(utf8.UTFMax-1) {
					t.Errorf("%s: kept %d bytes", name, len(got))
				}
				i := strings.Index(got, "\n[... jaild: ")
				if i < 0 {
					t.Fatalf("%s: no marker in %q", name, got)
				}
				rest := got[i+1:]
				j := strings.Index(rest, "\n")
				var elided int
				fmt.Sscanf(rest[:j], "[... jaild: %d bytes", &elided)
				head, tail := got[:i], rest[j+1:]
				if !bytes.HasPrefix(data, []byte(head)) || !bytes.HasSuffix(data, []byte(tail)) || len(head)+elided+len(tail) != len(data) {
					t.Errorf("%s: head %d + elided %d + tail %d bytes, stream %d", name, len(head), elided, len(tail), len(data))
				}
			}
		}
	}
}
