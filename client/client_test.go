package client_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
)

// TestNewClientCleartextToken: a token goes over plain http only to
// loopback, unless the caller insists. No connection is made.
func TestNewClientCleartextToken(t *testing.T) {
	tests := []struct {
		name string
		opts client.Options
		want error // nil: accepted
	}{
		{"http to another host", client.Options{Server: "http://192.0.2.1:8080", Token: "t"}, client.ErrCleartextToken},
		{"http to a name", client.Options{Server: "http://jaild.example:8080/run", Token: "t"}, client.ErrCleartextToken},
		{"http to all interfaces", client.Options{Server: "http://0.0.0.0:8080", Token: "t"}, client.ErrCleartextToken},
		{"insecure plaintext", client.Options{Server: "http://192.0.2.1:8080", Token: "t", InsecurePlaintext: true}, nil},
		{"https", client.Options{Server: "https://192.0.2.1:8443", Token: "t"}, nil},
		{"no token", client.Options{Server: "http://192.0.2.1:8080"}, nil},
		{"127.0.0.1", client.Options{Server: "http://127.0.0.1:8080", Token: "t"}, nil},
		{"127.1.2.3", client.Options{Server: "http://127.1.2.3:8080", Token: "t"}, nil},
		{"::1", client.Options{Server: "http://[::1]:8080", Token: "t"}, nil},
		{"localhost", client.Options{Server: "http://LocalHost:8080", Token: "t"}, nil},
		{"socket", client.Options{Socket: "/run/jaild.sock", Token: "t"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.New(tt.opts)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("NewClient: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNewClientRootCAs(t *testing.T) {
	pool := x509.NewCertPool()
	tests := []struct {
		name string
		opts client.Options
		ok   bool
	}{
		{"https", client.Options{Server: "https://127.0.0.1:8443", RootCAs: pool}, true},
		{"http", client.Options{Server: "http://127.0.0.1:8080", RootCAs: pool}, false},
		{"socket", client.Options{Socket: "/run/jaild.sock", RootCAs: pool}, false},
		{"own transport", client.Options{Server: "https://127.0.0.1:8443", RootCAs: pool, Transport: http.DefaultTransport}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := client.New(tt.opts); (err == nil) != tt.ok {
				t.Errorf("NewClient: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestReadCAFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificate here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadCAFile(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("ReadCAFile of a file without certificates: %v", err)
	}
	if _, err := client.ReadCAFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadCAFile of a missing file succeeded")
	}
}

// TestSessionLost: a fleet's 410 session_lost reaches the caller as such,
// with the daemon's message.
func TestSessionLost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		w.Write([]byte(`{"error":"the node that held session S is gone (unreachable): its workspace and files are lost; create a new session","code":"session_lost"}`))
	}))
	defer srv.Close()
	c, err := client.New(client.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background(), &api.Request{Command: "true", SessionID: "S"})
	if !client.IsSessionLost(err) || !strings.Contains(err.Error(), "create a new session") {
		t.Errorf("Run in a lost session: %v", err)
	}
	if api.CodeOutcome(api.CodeSessionLost).Status != http.StatusGone {
		t.Errorf("session_lost outcome %+v", api.CodeOutcome(api.CodeSessionLost))
	}
	if _, err := c.Run(context.Background(), &api.Request{Command: "true"}); client.IsSessionLost(errors.New("x")) || err == nil {
		t.Errorf("IsSessionLost of another error")
	}
}

// TestOlderDaemonNotFound: a daemon from before command_not_found answered a
// command not found with 422 not_found; the client reads it as
// command_not_found (exit 127), and a 404 not_found as what it is.
func TestOlderDaemonNotFound(t *testing.T) {
	for _, tt := range []struct {
		status   int
		wantCode string
		wantExit int
	}{
		{http.StatusUnprocessableEntity, api.CodeCommandNotFound, api.ExitNotFound},
		{http.StatusNotFound, api.CodeNotFound, api.ExitUsage},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tt.status)
			w.Write([]byte(`{"error":"jail: command not found","code":"not_found"}`))
		}))
		c, err := client.New(client.Options{Server: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Run(context.Background(), &api.Request{Command: "nope"})
		srv.Close()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Code != tt.wantCode || api.CodeOutcome(ae.Code).Exit != tt.wantExit {
			t.Errorf("%d not_found: %v, want code %s, exit %d", tt.status, err, tt.wantCode, tt.wantExit)
		}
	}
}
