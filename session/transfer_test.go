package session_test

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/jaild/jaild/caller"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/session"
	"github.com/jaild/jaild/session/files"
)

// filesServer serves the files API of m's sessions as the daemon does: the
// session held (Use) for the request, its removal signalled to the handler
// (Closing). The stall allowance is long, so that only the removal can cut
// a transfer within a test.
func filesServer(t *testing.T, m *session.Manager) *httptest.Server {
	t.Helper()
	hd := files.NewHandler(func(r *http.Request) (files.Root, error) {
		s, ok := session.FromContext(r.Context())
		if !ok {
			return files.Root{}, errors.New("no session")
		}
		uid, gid := s.HostIDs()
		return files.Root{Dir: s.Dir(), UID: uid, GID: gid, Size: s.Size(), Closing: s.Closing()}, nil
	}, files.Options{Stall: 10 * time.Minute})
	mux := http.NewServeMux()
	mux.HandleFunc("/files/{id}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		s, err := m.Get(caller.FromToken("a"), r.PathValue("id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		done, err := s.Use()
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		defer done()
		hd.ServeHTTP(w, r.WithContext(session.NewContext(r.Context(), s)))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// stallDownload starts a GET of a 64 MiB file of s through srv that reads
// the status line and then nothing: the handler blocks writing to it.
func stallDownload(t *testing.T, srv *httptest.Server, s *session.Session) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir(), "big"), make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: nil}
	c, err := d.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /files/%s/big HTTP/1.1\r\nHost: test\r\n\r\n", s.ID())
	line, err := bufio.NewReaderSize(c, 64).ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("GET: %q %v", line, err)
	}
	// Long enough for the server's writes to fill the socket buffers.
	time.Sleep(300 * time.Millisecond)
}

// TestStalledDownload: a client that stops reading a download holds
// neither the removal of its session (DELETE) nor the expiry of others.
func TestStalledDownload(t *testing.T) {
	t.Run("delete", func(t *testing.T) {
		m, _ := newManager(t, session.Config{})
		srv := filesServer(t, m)
		s := create(t, m, session.Options{Owner: caller.FromToken("a")})
		stallDownload(t, srv, s)
		done := make(chan error, 1)
		go func() { done <- m.Delete(caller.FromToken("a"), s.ID()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Delete: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Delete waits on a client that stopped reading a download")
		}
	})
	t.Run("expiry", func(t *testing.T) {
		// stalled reaches its maximum lifetime while its download is
		// stalled; idle expires later (created later, same lifetime).
		const life = 5 * time.Second
		m, _ := newManager(t, session.Config{TTL: life, MaxLifetime: life, ReapInterval: 50 * time.Millisecond})
		srv := filesServer(t, m)
		stalled := create(t, m, session.Options{Owner: caller.FromToken("a")})
		stallDownload(t, srv, stalled)
		idle := create(t, m, session.Options{Owner: caller.FromToken("a")})
		for _, s := range []*session.Session{stalled, idle} {
			select {
			case <-s.Done():
			case <-time.After(life + 3*time.Second):
				t.Fatalf("session %s not removed: the reaper waits on a stalled download", s.ID())
			}
		}
	})
}
