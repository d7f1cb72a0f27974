package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/run"
)

// stdioPeer is the client end of a StdioTransport: raw lines in, decoded
// lines out.
type stdioPeer struct {
	in    *io.PipeWriter
	lines chan map[string]any
}

// serveStdio serves NewMCPServer(b) over a StdioTransport on pipes.
func serveStdio(t *testing.T, b run.Base, maxLine int) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := NewMCPServer(Direct(b), MCPOptions{})
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(context.Background(), &StdioTransport{Reader: inR, Writer: outW, MaxLineLength: maxLine})
	}()
	p := &stdioPeer{in: inW, lines: make(chan map[string]any, 100)}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("server wrote a line that is not JSON: %q", sc.Text())
				continue
			}
			p.lines <- m
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		Recv(t, done, "the server to end")
		outR.Close()
		<-readDone
	})
	return p
}

func (p *stdioPeer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// next returns the next message the server wrote that is not a
// notification.
func (p *stdioPeer) next(t *testing.T) map[string]any {
	t.Helper()
	timeout := time.After(TestPatience)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatal("the server closed its output")
			}
			if _, isNote := m["method"]; isNote {
				continue
			}
			return m
		case <-timeout:
			t.Fatal("no response")
		}
	}
}

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

func TestMCPStdioBadLinesGetErrorsAndServingGoesOn(t *testing.T) {
	b := NewGate()
	p := serveStdio(t, b, 1000)
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := p.next(t); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A call in flight, which none of the bad lines may cancel.
	p.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1000"}}}`)
	Recv(t, b.Entered, "the run to start")
	for _, tt := range []struct {
		name string
		line string
		code float64
		id   any
	}{
		{"not JSON", `{"jsonrpc":"2.0","id":3,"method":`, -32700, nil},
		{"garbage", `hello`, -32700, nil},
		{"two values", `{} {}`, -32700, nil},
		{"JSON, no message", `{"foo":1}`, -32600, nil},
		{"a number", `42`, -32600, nil},
		{"wrong version", `{"jsonrpc":"1.0","id":7,"method":"ping"}`, -32600, 7.0},
		{"bad id type", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, -32600, nil},
		{"empty batch", `[]`, -32600, nil},
		{"batch of junk", `[1,2]`, -32600, nil},
		{"too long", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"` + strings.Repeat("x", 2000) + `"}}`, -32600, nil},
	} {
		p.send(t, tt.line)
		m := p.next(t)
		if errCode(m) != tt.code {
			t.Errorf("%s: %v, want error %v", tt.name, m, tt.code)
		}
		if id, ok := m["id"]; !ok || id != tt.id {
			t.Errorf("%s: id %v (present %v), want %v", tt.name, id, ok, tt.id)
		}
	}
	// Blank lines and surrounding spaces are no errors.
	p.send(t, "")
	p.send(t, `  {"jsonrpc":"2.0","id":10,"method":"ping"}  `)
	if m := p.next(t); m["id"] != 10.0 || m["error"] != nil {
		t.Errorf("ping: %v", m)
	}
	select {
	case err := <-b.Ended:
		t.Fatalf("the call in flight ended (%v)", err)
	default:
	}
	b.Open()
	if m := p.next(t); m["id"] != 2.0 || m["result"] == nil {
		t.Errorf("the call in flight: %v", m)
	}
}

func TestMCPStdioNoResponseAfterCancellation(t *testing.T) {
	b := NewGate()
	p := serveStdio(t, b, 0)
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	p.next(t)
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(t, `{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1000"}}}`)
	Recv(t, b.Entered, "the run to start")
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c","reason":"user"}}`)
	if err := Recv(t, b.Ended, "the run to be killed"); !errors.Is(err, context.Canceled) {
		t.Errorf("run ended with %v", err)
	}
	// The handler answers (or not) right after the run ends; a later
	// call's response comes after that.
	b.Open()
	p.send(t, `{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`)
	if m := p.next(t); m["id"] != "d" {
		t.Errorf("got %v, want only the response to d", m)
	}
}

func TestMCPHTTPRequestWithoutSessionIs400(t *testing.T) {
	url := httpMCP(t, &FakeBase{}, MCPOptions{})
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	} {
		resp, body := post(t, context.Background(), url, "", nil, msg)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Mcp-Session-Id") {
			t.Errorf("%s: %d %s, want 400 naming Mcp-Session-Id", msg, resp.StatusCode, body)
		}
		if resp.Header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s: a session was started", msg)
		}
	}
	// initialize still starts one.
	initMCPSession(t, url)
}

func TestMCPHTTPNoResponseAfterCancellation(t *testing.T) {
	b := NewGate()
	url := httpMCP(t, b, MCPOptions{})
	id := initMCPSession(t, url)
	type answer struct {
		status int
		body   string
	}
	done := make(chan answer, 1)
	go func() {
		resp, body := post(t, context.Background(), url, id, nil,
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1000"}}}`)
		done <- answer{resp.StatusCode, body}
	}()
	Recv(t, b.Entered, "the run to start")
	resp, body := post(t, context.Background(), url, id, nil,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"user"}}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", resp.StatusCode, body)
	}
	if err := Recv(t, b.Ended, "the run to be killed"); !errors.Is(err, context.Canceled) {
		t.Errorf("run ended with %v", err)
	}
	if a := Recv(t, done, "the call's POST to end"); a.body != "" {
		t.Errorf("the cancelled call got a response: %d %s", a.status, a.body)
	}
	// The session goes on.
	b.Open()
	resp, body = post(t, context.Background(), url, id, nil,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"id":6`) {
		t.Errorf("call after the cancellation: %d %s", resp.StatusCode, body)
	}
}
