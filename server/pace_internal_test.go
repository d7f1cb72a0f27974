package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestUnreadBodyKeepsTheConnection: a request refused without its body
// read, whose answer the handler flushed (the files API does), leaves its
// keep-alive connection as usable as any: the next request on it is not
// born cancelled. It was: net/http read the small body to its end to
// discard it at the flush, began its background read there, and the
// deadline finish set in the past then failed that read before net/http
// called it off, which cancels the connection's context. The pause after
// the handler makes that order certain.
func TestUnreadBodyKeepsTheConnection(t *testing.T) {
	s := &Server{opts: Options{MinBodyRate: DefaultMinBodyRate, BodyRateGrace: DefaultBodyRateGrace}}
	h := s.paceBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusBadRequest)
			w.(http.Flusher).Flush()
			return
		}
		if err := r.Context().Err(); err != nil {
			http.Error(w, "born "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		time.Sleep(20 * time.Millisecond) // before net/http finishes the request
	}))
	defer ts.Close()

	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	send := func(path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("PUT", ts.URL+path, strings.NewReader(body))
		if err := req.Write(c); err != nil { // headers and body in one write
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("PUT %s: %v", path, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path != "/refuse" && resp.StatusCode != 200 {
			t.Fatalf("PUT %s after a refused one: %d %s", path, resp.StatusCode, data)
		}
		return resp
	}
	for i := 0; i < 5; i++ {
		if resp := send("/refuse", "x"); resp.Close {
			t.Fatalf("round %d: the refusal closed the connection", i)
		}
		send("/next", "y")
	}
}
