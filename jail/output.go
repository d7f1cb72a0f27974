package jail

import (
	"io"
	"unicode/utf8"
	"unsafe"

	"github.com/jaild/jaild/box"
)

// capture keeps the first and last bytes of a stream, up to max in all, and
// counts the rest. It holds one buffer that grows with the output up to
// max, never beyond, whatever the stream's size: the head in its first half
// and, once the stream overflows, a ring of the latest bytes in its second
// half. Its String method turns that buffer into the result in place.
type capture struct {
	max    int64
	buf    []byte
	ring   bool // the stream overflowed: buf[half:max] is a ring
	filled int  // bytes in the ring
	next   int  // index in the ring of the next byte, and of the oldest once full
	total  int64
	tee    io.Writer
	teeErr error
}

func newCapture(max int64, tee io.Writer) *capture {
	return &capture{max: max, tee: tee}
}

func (c *capture) half() int { return int(c.max / 2) }

// Write implements io.Writer. It never fails, so a draining io.Copy never
// stops early; a failing tee is remembered and no longer written to.
func (c *capture) Write(p []byte) (int, error) {
	if c.tee != nil && c.teeErr == nil {
		if _, err := c.tee.Write(p); err != nil {
			c.teeErr = err
		}
	}
	n := len(p)
	c.total += int64(n)
	if c.total <= c.max {
		c.buf = appendBounded(c.buf, p, int(c.max))
		return n, nil
	}
	if !c.ring {
		// First overflow: the head is full and what came after it, in
		// order, starts the ring.
		full := make([]byte, c.max)
		copy(full, c.buf)
		k := min(c.half()-min(len(c.buf), c.half()), len(p))
		copy(full[len(c.buf):], p[:k])
		p = p[k:]
		c.filled = len(c.buf) + k - c.half()
		c.next = c.filled
		c.buf, c.ring = full, true
	}
	c.push(p)
	return n, nil
}

// appendBounded appends p to b, growing b's capacity as append would but
// never beyond limit, which len(b)+len(p) must not exceed.
func appendBounded(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		grown := make([]byte, len(b), min(max(2*cap(b), need, 512), limit))
		copy(grown, b)
		b = grown
	}
	return append(b, p...)
}

// push writes p into the ring, keeping its latest bytes.
func (c *capture) push(p []byte) {
	r := c.buf[c.half():]
	size := len(r)
	if size == 0 {
		return
	}
	if len(p) >= size {
		copy(r, p[len(p)-size:])
		c.filled, c.next = size, 0
		return
	}
	for len(p) > 0 {
		k := copy(r[c.next:], p)
		p = p[k:]
		c.next = (c.next + k) % size
		c.filled = min(size, c.filled+k)
	}
}

// truncated reports whether bytes were dropped.
func (c *capture) truncated() bool { return c.total > c.max }

// String returns the kept bytes, at most max of them: all of them, or head,
// marker and tail, the marker counting against max. Head and tail of UTF-8
// text end and start on character boundaries, so that no character is cut
// in two (a few bytes fewer may be kept for that). A max too small to hold the
// marker keeps the head alone. The string shares the capture's buffer,
// which must not be written to afterwards.
func (c *capture) String() string {
	defer func() { c.buf = nil }()
	if !c.truncated() {
		return unsafe.String(unsafe.SliceData(c.buf), len(c.buf))
	}
	// The marker's length depends on how much is elided, which depends on
	// the marker's length. Start from the marker for the whole stream
	// (too long, if anything) and shorten it while keeping more bytes
	// takes a digit off the count: the count only falls, so this ends,
	// and the result fills max exactly.
	mlen := int64(len(box.Elide(c.total)))
	if mlen > c.max {
		head := c.buf[:headEnd(c.buf[:c.half()])]
		return unsafe.String(unsafe.SliceData(head), len(head)) // no room for the marker
	}
	for {
		shorter := int64(len(box.Elide(c.total - (c.max - mlen))))
		if shorter >= mlen {
			break
		}
		mlen = shorter
	}
	keep := c.max - mlen
	headN := int(keep / 2)
	tailN := int(keep) - headN
	// The ring, oldest byte first, ends the buffer; its last tailN bytes
	// are then the result's tail, less the pieces of a character cut at
	// either end. The marker, whose count can only grow by a digit for
	// the bytes dropped so, then fits where the kept head and tail leave
	// room, and the tail moves up to it.
	rotate(c.buf[c.half():], c.next)
	tail := c.buf[int(c.max)-tailN:]
	tail = tail[tailStart(tail):]
	headN = headEnd(c.buf[:headN])
	marker := box.Elide(c.total - int64(headN) - int64(len(tail)))
	n := copy(c.buf[headN:], marker)
	n += copy(c.buf[headN+n:], tail)
	return unsafe.String(unsafe.SliceData(c.buf), headN+n)
}

// headEnd is the length of b without a character cut short at its end, if
// b is UTF-8 text up to it; other output keeps its bytes.
func headEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) && utf8.Valid(b[:i]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// tailStart is where b starts once the rest of a character cut at its
// start is skipped (at most UTFMax-1 continuation bytes), if b is UTF-8
// text after them; other output keeps its bytes.
func tailStart(b []byte) int {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	if i > 0 && !utf8.Valid(b[i:]) {
		return 0
	}
	return i
}

// rotate moves b[k:] before b[:k], in place.
func rotate(b []byte, k int) {
	reverse(b[:k])
	reverse(b[k:])
	reverse(b)
}

func reverse(b []byte) {
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}
