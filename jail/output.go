package jail

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unsafe"
)

// capture keeps the first and last bytes of a stream, up to max in all, and
// counts the rest. Its memory is bounded by max whatever the stream's size:
// buffers grow with the output, never past max, and [capture.String] hands
// them over rather than copying them.
type capture struct {
	max    int64
	head   []byte
	tail   []byte // ring buffer of cap max-len(head), valid once total > max
	start  int    // index of the oldest byte in tail
	total  int64
	tee    io.Writer
	teeErr error
}

func newCapture(max int64, tee io.Writer) *capture {
	return &capture{max: max, tee: tee}
}

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
	headMax := int(c.max / 2)
	if c.total <= c.max {
		// Everything still fits: keep it all in head, which is split into
		// head and tail only once the stream overflows.
		c.head = appendBounded(c.head, p, int(c.max))
		return n, nil
	}
	if c.tail == nil {
		// First overflow: head keeps its first headMax bytes, topped up
		// from p; everything after them goes through the tail ring.
		c.tail = make([]byte, 0, int(c.max)-headMax)
		if len(c.head) > headMax {
			c.pushTail(c.head[headMax:])
			// Let go of the part of head's array that tail now holds.
			c.head = append(make([]byte, 0, headMax), c.head[:headMax]...)
		} else {
			k := min(headMax-len(c.head), len(p))
			c.head = appendBounded(c.head, p[:k], headMax)
			p = p[k:]
		}
	}
	c.pushTail(p)
	return n, nil
}

// appendBounded appends p to b, growing b's capacity as append would but
// never beyond limit, which len(b)+len(p) must not exceed: append's doubling
// would otherwise hold up to twice the cap for a stream just above half of
// it.
func appendBounded(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		grown := make([]byte, len(b), min(max(2*cap(b), need, 512), limit))
		copy(grown, b)
		b = grown
	}
	return append(b, p...)
}

func (c *capture) pushTail(p []byte) {
	size := cap(c.tail)
	if size == 0 {
		return
	}
	if len(p) >= size {
		c.tail = append(c.tail[:0], p[len(p)-size:]...)
		c.start = 0
		return
	}
	for len(p) > 0 {
		if len(c.tail) < size {
			k := min(size-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.start:], p)
		p = p[k:]
		c.start = (c.start + k) % size
	}
}

// truncated reports whether bytes were dropped.
func (c *capture) truncated() bool { return c.total > c.max }

// String returns the kept bytes, at most max of them: all of them, or head,
// marker and tail, the marker counting against max. A max too small to hold
// the marker keeps the head alone. The capture hands its buffers
// over and must not be written to afterwards.
func (c *capture) String() string {
	defer func() { c.head, c.tail = nil, nil }()
	if !c.truncated() {
		// head is never written again: the string may share it.
		return unsafe.String(unsafe.SliceData(c.head), len(c.head))
	}
	// The marker's length depends on how much is elided, which depends on
	// the marker's length. Start from the marker for the whole stream
	// (too long, if anything) and shorten it while keeping more bytes
	// takes a digit off the count: the count only falls, so this ends,
	// and the result fills max exactly.
	mlen := int64(len(Elide(c.total)))
	if mlen > c.max {
		return string(c.head) // no room for the marker: the head alone
	}
	for {
		shorter := int64(len(Elide(c.total - (c.max - mlen))))
		if shorter >= mlen {
			break
		}
		mlen = shorter
	}
	keep := c.max - mlen
	headN := min(int64(len(c.head)), keep/2)
	tailN := min(int64(len(c.tail)), keep-headN)
	var b strings.Builder
	b.Grow(int(c.max))
	b.Write(c.head[:headN])
	b.WriteString(Elide(c.total - headN - tailN))
	// The ring's newest tailN bytes, oldest first: the ring in order is
	// tail[start:] then tail[:start].
	older, newer := c.tail[c.start:], c.tail[:c.start]
	skip := len(c.tail) - int(tailN)
	if skip < len(older) {
		b.Write(older[skip:])
		b.Write(newer)
	} else {
		b.Write(newer[skip-len(older):])
	}
	return b.String()
}

// Elide is the marker that stands in output for n bytes that were cut from
// its middle. It is on a line of its own so that both people and models can
// tell a partial result from a complete one.
func Elide(n int64) string {
	return fmt.Sprintf("\n[... jaild: %s bytes of output elided ...]\n", strconv.FormatInt(n, 10))
}
