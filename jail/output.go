package jail

import (
	"fmt"
	"io"
	"strconv"
)

// capture keeps the first and last bytes of a stream, up to max in all, and
// counts the rest. Its memory is bounded by max whatever the stream's size.
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
		c.head = append(c.head, p...)
		return n, nil
	}
	if c.tail == nil {
		// First overflow: head keeps its first headMax bytes, topped up
		// from p; everything after them goes through the tail ring.
		c.tail = make([]byte, 0, int(c.max)-headMax)
		var rest []byte
		if len(c.head) > headMax {
			rest = append(rest, c.head[headMax:]...)
			c.head = c.head[:headMax:headMax]
		} else {
			k := min(headMax-len(c.head), len(p))
			c.head = append(c.head, p[:k]...)
			p = p[k:]
		}
		c.pushTail(rest)
	}
	c.pushTail(p)
	return n, nil
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

// String returns the kept bytes: all of them, or head, marker and tail.
func (c *capture) String() string {
	if !c.truncated() {
		return string(c.head)
	}
	tail := append(append([]byte(nil), c.tail[c.start:]...), c.tail[:c.start]...)
	cut := c.total - int64(len(c.head)) - int64(len(tail))
	return string(c.head) + Elide(cut) + string(tail)
}

// Elide is the marker that stands in output for n bytes that were cut from
// its middle. It is on a line of its own so that both people and models can
// tell a partial result from a complete one.
func Elide(n int64) string {
	return fmt.Sprintf("\n[... jaild: %s bytes of output elided ...]\n", strconv.FormatInt(n, 10))
}
