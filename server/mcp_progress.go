package server

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Output streamed as MCP progress notifications while a command runs.

// Progress streaming. Output is batched rather than sent per write so a
// chatty command costs a notification per interval, not per line; the
// pending bytes are bounded so a slow client never makes memory grow (nor
// slows the command: the tee only appends to the buffer).
const (
	progressInterval   = 100 * time.Millisecond
	maxProgressPending = 256 << 10
	maxProgressMessage = 16 << 10
	// ProgressStreamMetaKey is the _meta key of a progress notification
	// that says which stream ("stdout" or "stderr") its message is from;
	// heartbeats carry none.
	ProgressStreamMetaKey = "jaild/stream"
)

// progressStream sends a command's output as progress notifications while
// it runs. Writers only append to a bounded buffer; one goroutine, joined
// by close, sends what accumulated every progressInterval, and a heartbeat
// when there was nothing to send for MCPOptions.Heartbeat so that clients
// that reset their request timeout on progress keep waiting.
type progressStream struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	start   time.Time
	beat    time.Duration

	mu      sync.Mutex
	pending []chunk
	size    int
	dropped map[string]int64
	carry   map[string][]byte // an incomplete UTF-8 sequence at the end of a write

	last float64 // last progress value sent; only the sender goroutine uses it
	done chan struct{}
	wg   sync.WaitGroup
}

type chunk struct {
	stream string
	data   []byte
}

func newProgressStream(ctx context.Context, ss *mcp.ServerSession, token any, beat time.Duration) *progressStream {
	p := &progressStream{
		ctx: ctx, session: ss, token: token, start: time.Now(), beat: beat,
		dropped: map[string]int64{}, carry: map[string][]byte{},
		done: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

type streamWriter struct {
	p      *progressStream
	stream string
}

func (p *progressStream) writer(stream string) *streamWriter { return &streamWriter{p, stream} }

// Write never blocks on the client and never fails, so it cannot slow the
// command down or end the jail's tee.
func (w *streamWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	data := append(p.carry[w.stream], b...)
	cut := completeUTF8(data)
	p.carry[w.stream] = append([]byte(nil), data[cut:]...)
	p.add(w.stream, data[:cut])
	return len(b), nil
}

// add queues data for stream; p.mu is held.
func (p *progressStream) add(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	if room := maxProgressPending - p.size; len(data) > room {
		p.dropped[stream] += int64(len(data) - max(room, 0))
		data = data[:max(room, 0)]
		if len(data) == 0 {
			return
		}
	}
	p.size += len(data)
	if n := len(p.pending); n > 0 && p.pending[n-1].stream == stream {
		p.pending[n-1].data = append(p.pending[n-1].data, data...)
		return
	}
	p.pending = append(p.pending, chunk{stream, append([]byte(nil), data...)})
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end inside a UTF-8 sequence, so a character split across two reads from
// the pipe is not sent as two invalid halves.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}

func (p *progressStream) take(final bool) []chunk {
	p.mu.Lock()
	defer p.mu.Unlock()
	if final {
		for _, s := range []string{"stdout", "stderr"} {
			p.add(s, p.carry[s])
			p.carry[s] = nil
		}
	}
	for _, s := range []string{"stdout", "stderr"} {
		if n := p.dropped[s]; n > 0 {
			p.pending = append(p.pending, chunk{s, fmt.Appendf(nil, "\n[... jaild: %d bytes of output not streamed (client too slow) ...]\n", n)})
			p.dropped[s] = 0
		}
	}
	c := p.pending
	p.pending, p.size = nil, 0
	return c
}

func (p *progressStream) loop() {
	defer p.wg.Done()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	lastSent := time.Now()
	for {
		select {
		case <-p.done:
			p.send(p.take(true))
			return
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		if c := p.take(false); len(c) > 0 {
			p.send(c)
			lastSent = time.Now()
		} else if time.Since(lastSent) >= p.beat {
			p.notify("", "")
			lastSent = time.Now()
		}
	}
}

func (p *progressStream) send(chunks []chunk) {
	for _, c := range chunks {
		for data := c.data; len(data) > 0; {
			n := len(data)
			if n > maxProgressMessage {
				n = maxProgressMessage
				// Back up to a character boundary (at most 3 bytes).
				for i := n; i > n-utf8.UTFMax && i > 0; i-- {
					if utf8.RuneStart(data[i]) {
						n = i
						break
					}
				}
			}
			p.notify(c.stream, string(data[:n]))
			data = data[n:]
		}
	}
}

func (p *progressStream) notify(stream, msg string) {
	// Progress must increase with every notification: elapsed
	// milliseconds, nudged past the previous value. There is no total:
	// the time a call waits for a sandbox is not bounded by its timeout.
	v := max(float64(time.Since(p.start).Milliseconds()), p.last+1)
	p.last = v
	params := &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: v, Message: msg}
	if stream != "" {
		params.Meta = mcp.Meta{ProgressStreamMetaKey: stream}
	}
	// An error means the client is gone or slow to the point of failing
	// writes; the call's own ctx handles that, and the result carries
	// the output anyway.
	_ = p.session.NotifyProgress(p.ctx, params)
}

// close stops the stream after a final flush and waits for its goroutine.
func (p *progressStream) close() {
	close(p.done)
	p.wg.Wait()
}
