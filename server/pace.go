package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// A request body must keep coming. A client that sends its body slowly
// holds a connection, one of --max-conns, that never counts as idle; a few
// hundred of them at a byte a second would keep every other client out for
// as long as the body timeout. So every body, once the handler starts, is
// read through a pacedBody: after Options.BodyRateGrace it must have
// arrived at Options.MinBodyRate on average, or its read fails and the
// handler answers 408. And when the server is full, a connection still
// sending its request after staleNewConn may be taken for another peer's
// (see connLimiter.reclaimSlowLocked).

// slowBodyError is the error a paced body's read fails with once the body
// falls behind, or its connection was taken for another peer's. It is a
// timeout (net.Error) wrapping os.ErrDeadlineExceeded, as a read past a
// deadline is, so that handlers answer it as one.
type slowBodyError struct{ msg string }

func (e *slowBodyError) Error() string   { return e.msg }
func (e *slowBodyError) Timeout() bool   { return true }
func (e *slowBodyError) Temporary() bool { return false }
func (e *slowBodyError) Unwrap() error   { return os.ErrDeadlineExceeded }

// pacedBody is a request body whose reads must keep up with a minimum
// rate, by a read deadline set before each read: the n bytes read so far
// must have come within grace + n/rate of the start.
type pacedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	tc    *trackedConn // nil when not served through a connLimiter
	start time.Time
	rate  int64 // bytes per second; 0: no minimum
	grace time.Duration

	// limit, if not zero, is a deadline the handler set for the whole
	// body (limitBody).
	limit time.Time
	// length is the request's Content-Length, -1 if unknown;
	// expectsContinue, that its client waits for a 100 Continue.
	length          int64
	expectsContinue bool
	n               int64
	err             error
	discardErr      error // why discardRest stopped short
	eof             bool  // the body was read to its end
	discarding      bool  // finish is in discardRest
	done            bool
}

// paceBodies serves next with every request body paced (see pacedBody), and
// tells the connection limiter when a request has been received whole.
func (s *Server) paceBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		if r.Body == nil || r.Body == http.NoBody {
			tc.received()
			next.ServeHTTP(w, r)
			return
		}
		b := &pacedBody{body: r.Body, rc: http.NewResponseController(w), tc: tc, start: time.Now(),
			rate: max(s.opts.MinBodyRate, 0), grace: s.opts.BodyRateGrace, length: r.ContentLength,
			expectsContinue: strings.EqualFold(r.Header.Get("Expect"), "100-continue")}
		defer b.finish()
		r2 := r.WithContext(r.Context()) // a shallow copy: handlers must not modify r
		r2.Body = b
		next.ServeHTTP(w, r2)
	})
}

// limitBody sets a deadline for the whole of r's body, on top of its pace.
func limitBody(rc *http.ResponseController, r *http.Request, deadline time.Time) {
	if b, ok := r.Body.(*pacedBody); ok {
		b.limit = deadline
		return
	}
	_ = rc.SetReadDeadline(deadline)
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	deadline, paced := b.limit, false
	if b.rate > 0 {
		d := b.start.Add(b.grace + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second)))
		if deadline.IsZero() || d.Before(deadline) {
			deadline, paced = d, true
		}
	}
	_ = b.rc.SetReadDeadline(deadline)
	// After the deadline is set: a connection taken for another peer
	// meanwhile has had its deadline moved to now (or sees its mark here).
	if b.tc.wasTaken() {
		b.err = errTaken
		return 0, b.err
	}
	n, err := b.body.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		switch {
		case b.tc.wasTaken():
			b.err = errTaken
		case paced:
			b.err = &slowBodyError{fmt.Sprintf("request body arrived slower than %d bytes/s (%d bytes in %v)",
				b.rate, b.n, time.Since(b.start).Round(time.Millisecond))}
		default:
			b.err = err
		}
		return n, b.err
	case err != nil:
		b.eof = errors.Is(err, io.EOF)
		if ferr := b.finish(); ferr != nil {
			b.err = ferr
			return n, ferr
		}
	}
	return n, err
}

func (b *pacedBody) Close() error { return b.body.Close() }

// finish lifts the body's deadline and tells the connection limiter that
// the request is received, once; it fails if the connection was taken for
// another peer's before that. A body the handler left unread is read to
// its end first, at its pace, while finish is not called again by Read
// (see discardRest).
func (b *pacedBody) finish() error {
	if b.done || b.discarding {
		return nil
	}
	if !b.eof && b.err == nil {
		b.discarding = true
		b.discardRest()
		b.discarding = false
	}
	b.done = true
	if !b.eof {
		// Cut short (too slow, its connection taken, a read error) or
		// too long to read on: net/http would read the rest to discard
		// it, at the client's pace and without a deadline, keeping the
		// connection. A deadline now makes it give up and close the
		// connection, saying so in the answer. Unless the handler
		// closed the body: net/http then knows whether it was read to
		// its end, and does not read on.
		if !errors.Is(b.discardErr, http.ErrBodyReadAfterClose) {
			_ = b.rc.SetReadDeadline(time.Now())
		}
		return nil
	}
	if !b.tc.received() {
		return errTaken
	}
	// net/http reads on in the background once the body is read, to
	// notice a client that goes away: a deadline left would end that read
	// and so cancel the request as if the client had gone.
	_ = b.rc.SetReadDeadline(time.Time{})
	return nil
}

// maxDiscard is how much of a body its handler left unread is read to keep
// the connection, as net/http does after a handler (256 KiB); a longer
// rest closes the connection.
const maxDiscard = 256 << 10

// errUnread: discardRest did not read a body, because it is longer than
// maxDiscard or its client waits for a 100 Continue that was never sent.
var errUnread = errors.New("body left unread")

// discardRest reads to its end, at its pace, a body the handler did not
// (b.eof says whether it got there). net/http would do the same after the
// handler, without the pace; reading it here, under a deadline still in
// the future, matters for what comes next on the connection: at the body's
// end net/http starts a read in the background to notice a client that
// goes away, and if that read failed at a deadline already past before
// net/http called it off, it would cancel the context of the connection,
// and so of every later request on it, as if the client had gone. A body
// net/http has read to its end already (a handler's Flush does that) reads
// as at its end here.
func (b *pacedBody) discardRest() {
	switch {
	case b.n == 0 && b.expectsContinue:
		b.discardErr = errUnread // net/http closes such a connection itself
		return
	case b.length >= 0 && b.length-b.n > maxDiscard:
		b.discardErr = errUnread
		return
	}
	_, err := io.CopyN(io.Discard, b, maxDiscard+1)
	switch {
	case b.eof:
	case err == nil:
		b.discardErr = errUnread // chunked, and longer than maxDiscard
	default:
		b.discardErr = err
	}
}

// errTaken fails the body read of a request whose connection was taken
// for another peer's.
var errTaken = &slowBodyError{"the server is full and this connection was closed for another client's: " +
	"its request was still arriving"}
