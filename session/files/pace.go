package files

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Defaults of the transfer pace (Options.MinRate, Options.Stall).
const (
	DefaultMinRate = 16 << 10 // bytes per second
	DefaultStall   = 10 * time.Second
)

// paceWindow is the amount of data after which a transfer's deadline is
// extended: each window must move within Stall + paceWindow/MinRate.
const paceWindow = 64 << 10

// A pacer keeps a transfer's connection deadlines moving with its
// progress: a client that sends or reads each window of data in time may
// take as long as the transfer needs, one that stops (or trickles below
// the minimum rate) is cut off at the next deadline instead of holding its
// session (and that session's removal) for ever. Cut ends the transfer at
// once, whatever the client does.
type pacer struct {
	rc     *http.ResponseController
	window time.Duration

	mu       sync.Mutex
	cut      bool
	moved    int64 // bytes since the deadline was last extended
	deadline time.Time
}

func newPacer(w http.ResponseWriter, o *Options) *pacer {
	p := &pacer{rc: http.NewResponseController(w), window: o.Stall + time.Duration(paceWindow*int64(time.Second)/o.MinRate)}
	p.extend()
	return p
}

// extend gives the next window its deadline; p.mu is held, or p is new.
func (p *pacer) extend() {
	if p.cut {
		return
	}
	p.moved = 0
	p.deadline = time.Now().Add(p.window)
	p.set(p.deadline)
}

func (p *pacer) set(t time.Time) {
	// ErrNotSupported: a ResponseWriter without a connection (a test's
	// recorder); it has no client to wait for either.
	_ = p.rc.SetReadDeadline(t)
	_ = p.rc.SetWriteDeadline(t)
}

// progress counts n bytes moved.
func (p *pacer) progress(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.moved += int64(n); p.moved >= paceWindow {
		p.extend()
	}
}

// stop cuts the transfer: its reads and writes fail from now on.
func (p *pacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.set(time.Now())
}

// cutOn stops p once ctx is done; the returned function undoes that.
func (p *pacer) cutOn(ctx context.Context) (release func() bool) {
	return context.AfterFunc(ctx, p.stop)
}

type pacedWriter struct {
	w io.Writer
	p *pacer
}

func (w pacedWriter) Write(b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		n, err := w.w.Write(b[:min(len(b), paceWindow)])
		total += n
		w.p.progress(n)
		if err != nil {
			return total, err
		}
		b = b[n:]
	}
	return total, nil
}

type pacedReader struct {
	r io.ReadCloser
	p *pacer
}

func (r pacedReader) Close() error { return r.r.Close() }

func (r pacedReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.progress(n)
	return n, err
}

// errCut: the transfer was cut because the session is being removed.
var errCut = errors.New("the session is being removed")

// finish ends a transfer that was not cut: what the response still holds
// is flushed under the last window's deadline, then the deadlines are
// lifted, so that they do not reach into the next request on the
// connection.
func (p *pacer) finish() {
	_ = p.rc.Flush()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.set(time.Time{})
	}
}

// pacedResponse is a ResponseWriter whose writes count on its pacer.
type pacedResponse struct {
	http.ResponseWriter
	p *pacer
}

func (w pacedResponse) Write(b []byte) (int, error) {
	return pacedWriter{w.ResponseWriter, w.p}.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w pacedResponse) Unwrap() http.ResponseWriter { return w.ResponseWriter }
