package files_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/session/files"
)

// TestStalledTransfer: a client that stops reading a download, or stops
// sending an upload, is cut off once a window of data has not moved in
// time, and the workspace is let go (Root.Done).
func TestStalledTransfer(t *testing.T) {
	h := newWorkspace(t, 128<<20)
	if err := os.WriteFile(h.path("big"), make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{}, 4)
	hd := files.NewHandler(func(*http.Request) (files.Root, error) {
		r := h.root
		r.Done = func() { released <- struct{}{} }
		return r, nil
	}, files.Options{Stall: 300 * time.Millisecond, MinRate: 1 << 30})
	mux := http.NewServeMux()
	mux.Handle("/f/{path...}", hd)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ name, request string }{
		{"download", "GET /f/big HTTP/1.1\r\nHost: t\r\n\r\n"},
		{"upload", "PUT /f/up HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\npartial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			fmt.Fprint(c, tc.request)
			if tc.name == "download" {
				if line, err := bufio.NewReaderSize(c, 64).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
					t.Fatalf("GET: %q %v", line, err)
				}
			}
			select {
			case <-released:
			case <-time.After(5 * time.Second):
				t.Fatal("a stalled transfer still holds the workspace")
			}
		})
	}
	if ents, _ := os.ReadDir(h.root.Dir); len(ents) != 1 {
		t.Errorf("the cut upload left files: %v", ents)
	}
	h.check(t)
}
