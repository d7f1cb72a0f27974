package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP over stdio: the SDK's newline-delimited transport, behind a reader
// that answers what the SDK would close the connection on.

// DefaultMCPMaxLine is StdioTransport.MaxLineLength's default: the SDK's.
const DefaultMCPMaxLine = mcp.DefaultMaxLineLength

// StdioTransport is an [mcp.Transport] over a reader and a writer of
// newline-delimited JSON-RPC, like [mcp.IOTransport], that keeps serving
// past bad input, as JSON-RPC 2.0 asks: a line that is not JSON is answered
// with a -32700 Parse error, one that is JSON but no JSON-RPC message (or
// batch of them) with a -32600 Invalid Request, a line longer than
// MaxLineLength with -32600 too; each with id null (or the request's id if
// it has a valid one), and the calls in flight go on. (The SDK's transport
// ends the session at the first such line, cancelling every call in
// flight.) It also sends no response to a call that the client cancelled
// with notifications/cancelled, as the MCP specification asks.
type StdioTransport struct {
	Reader io.ReadCloser
	Writer io.WriteCloser
	// MaxLineLength bounds one message; zero means DefaultMCPMaxLine.
	MaxLineLength int
}

// Connect implements [mcp.Transport]. It starts a goroutine that reads
// Reader until its end, or until the connection is closed and a line
// arrives (a blocked read of a pipe cannot be interrupted; the SDK's own
// transport has the same limit).
func (t *StdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	max := t.MaxLineLength
	if max <= 0 {
		max = DefaultMCPMaxLine
	}
	pr, pw := io.Pipe()
	out := &lockedWriter{w: t.Writer}
	// The SDK's transport reads only lines that pass the checks below, so
	// it never sees input it would fail on. Its limit is above ours: a
	// line may not grow by passing.
	inner, err := (&mcp.IOTransport{Reader: pr, Writer: out, MaxLineLength: max + 1}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &stdioConn{Connection: inner, in: t.Reader, out: out, calls: map[jsonrpc.ID]bool{}}
	go c.filter(t.Reader, pw, max)
	return c, nil
}

// lockedWriter serializes the SDK's writes (one message each) with the
// error responses of stdioConn.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

type stdioConn struct {
	mcp.Connection
	in  io.Closer
	out *lockedWriter

	mu sync.Mutex
	// calls are the ids of the single (not batched) calls awaiting a
	// response; true once the client cancelled the call.
	calls map[jsonrpc.ID]bool
}

// Write implements [mcp.Connection]: it drops the response to a call that
// the client cancelled.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		cancelled, tracked := c.calls[resp.ID]
		delete(c.calls, resp.ID)
		c.mu.Unlock()
		if tracked && cancelled {
			return nil
		}
	}
	return c.Connection.Write(ctx, msg)
}

// Close implements [mcp.Connection].
func (c *stdioConn) Close() error {
	err := c.Connection.Close()
	return errors.Join(err, c.in.Close())
}

// filter copies the good lines of r to pw, for the SDK, and answers the bad
// ones itself.
func (c *stdioConn) filter(r io.Reader, pw *io.PipeWriter, max int) {
	br := bufio.NewReader(r)
	for {
		line, tooLong, err := readLine(br, max)
		// Trimmed: the SDK's reader fails on anything but a newline
		// after a message.
		line = bytes.TrimSpace(line)
		if len(line) > 0 || tooLong {
			var fwd bool
			if tooLong {
				c.reply(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: message longer than %d bytes", max))
			} else {
				fwd = c.check(line)
			}
			if fwd {
				if _, werr := pw.Write(append(line, '\n')); werr != nil {
					return // the connection is closed
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line of at most max bytes, without its newline; a
// longer one is read to its end, dropped, and reported.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte{'\n'}), tooLong, err
	}
}

// check answers line if it is no JSON-RPC message or batch, and reports
// whether it is to be passed on. It notes the calls and cancellations it
// passes on.
func (c *stdioConn) check(line []byte) bool {
	if !json.Valid(line) {
		c.reply(jsonrpc.ID{}, jsonrpc.CodeParseError, "Parse error: the line is not JSON")
		return false
	}
	if line[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(line, &batch); err != nil || len(batch) == 0 {
			c.reply(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch")
			return false
		}
		ids := map[jsonrpc.ID]bool{}
		for _, raw := range batch {
			msg, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				c.reply(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request in a batch: "+err.Error())
				return false
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
				if ids[req.ID] {
					c.reply(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: id %v twice in a batch", req.ID.Raw()))
					return false
				}
				ids[req.ID] = true
			}
		}
		return true
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		c.reply(idOf(line), jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error())
		return false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case req.IsCall():
		c.calls[req.ID] = false
	case req.Method == "notifications/cancelled":
		var p struct {
			RequestID any `json:"requestId"`
		}
		if json.Unmarshal(req.Params, &p) == nil {
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
				if _, ok := c.calls[id]; ok {
					c.calls[id] = true
				}
			}
		}
	}
	return true
}

// idOf is the id of a message that is no valid request, if it has a valid
// one (a string or a number), else the null id.
func idOf(line []byte) jsonrpc.ID {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return jsonrpc.ID{}
	}
	id, err := jsonrpc.MakeID(m.ID)
	if err != nil {
		return jsonrpc.ID{}
	}
	return id
}

// reply writes a JSON-RPC error response. The SDK's encoder leaves out a
// null id, which JSON-RPC requires in an error about an unreadable request.
func (c *stdioConn) reply(id jsonrpc.ID, code int64, msg string) {
	type wireErr struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	data, err := json.Marshal(struct {
		JSONRPC string  `json:"jsonrpc"`
		ID      any     `json:"id"`
		Error   wireErr `json:"error"`
	}{"2.0", id.Raw(), wireErr{code, msg}})
	if err != nil {
		return // only strings and numbers: cannot fail
	}
	_, _ = c.out.Write(append(data, '\n'))
}
