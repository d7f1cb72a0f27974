package server_test

import (
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/server"
)

// TestNewClientCleartextToken: a token goes over plain http only to
// loopback, unless the caller insists. No connection is made.
func TestNewClientCleartextToken(t *testing.T) {
	tests := []struct {
		name string
		opts server.ClientOptions
		want error // nil: accepted
	}{
		{"http to another host", server.ClientOptions{Server: "http://192.0.2.1:8080", Token: "t"}, server.ErrCleartextToken},
		{"http to a name", server.ClientOptions{Server: "http://jaild.example:8080/run", Token: "t"}, server.ErrCleartextToken},
		{"http to all interfaces", server.ClientOptions{Server: "http://0.0.0.0:8080", Token: "t"}, server.ErrCleartextToken},
		{"insecure plaintext", server.ClientOptions{Server: "http://192.0.2.1:8080", Token: "t", InsecurePlaintext: true}, nil},
		{"https", server.ClientOptions{Server: "https://192.0.2.1:8443", Token: "t"}, nil},
		{"no token", server.ClientOptions{Server: "http://192.0.2.1:8080"}, nil},
		{"127.0.0.1", server.ClientOptions{Server: "http://127.0.0.1:8080", Token: "t"}, nil},
		{"127.1.2.3", server.ClientOptions{Server: "http://127.1.2.3:8080", Token: "t"}, nil},
		{"::1", server.ClientOptions{Server: "http://[::1]:8080", Token: "t"}, nil},
		{"localhost", server.ClientOptions{Server: "http://LocalHost:8080", Token: "t"}, nil},
		{"socket", server.ClientOptions{Socket: "/run/jaild.sock", Token: "t"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.NewClient(tt.opts)
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
		opts server.ClientOptions
		ok   bool
	}{
		{"https", server.ClientOptions{Server: "https://127.0.0.1:8443", RootCAs: pool}, true},
		{"http", server.ClientOptions{Server: "http://127.0.0.1:8080", RootCAs: pool}, false},
		{"socket", server.ClientOptions{Socket: "/run/jaild.sock", RootCAs: pool}, false},
		{"own transport", server.ClientOptions{Server: "https://127.0.0.1:8443", RootCAs: pool, Transport: http.DefaultTransport}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := server.NewClient(tt.opts); (err == nil) != tt.ok {
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
	if _, err := server.ReadCAFile(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("ReadCAFile of a file without certificates: %v", err)
	}
	if _, err := server.ReadCAFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadCAFile of a missing file succeeded")
	}
}
