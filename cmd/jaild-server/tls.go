package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// serverTLS is the TLS configuration of jaild serve --tls-cert/--tls-key.
//
// TLS 1.3 only: jaild's callers are programs (jaild remote, MCP clients,
// curl, CI runners), and every maintained TLS stack has spoken 1.3 since
// 2018 (OpenSSL 1.1.1, Go 1.12, Node 12, Java 11). 1.3 leaves nothing to
// choose: every suite is an AEAD with forward secrecy, and Go does not let
// its 1.3 suites be configured, so "Go's default ciphers" holds trivially.
//
// HTTP/1.1 only, also announced as such by ALPN: HTTP/2 would carry many
// requests on one connection, so --max-conns (which counts connections, and
// bounds the daemon's memory with --max-body) would no longer bound the
// requests being read. The connections reach net/http wrapped by the
// server's connection limiter, so net/http could not serve h2 on them
// anyway; offering it would break every client that accepts it.
func serverTLS(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: r.certificate,
	}, nil
}

// certReloader serves the certificate of its files and loads them again
// when they change, so that an operator (or certbot) can rotate them without
// restarting the daemon and killing its running commands. It stats both
// files at every handshake: two system calls, against the milliseconds of
// public-key work a handshake costs anyway.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	cert   *tls.Certificate
	loaded [2]fileStamp // of the files cert came from
	failed [2]fileStamp // of the files that last failed to load, not retried
}

// fileStamp tells whether a file changed: a rename over it (certbot's
// symlink switch, mv) changes the inode, a rewrite in place the mtime or
// size, and the chmod that fixes a refused key the mode.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
	mode     os.FileMode
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = st.Dev, st.Ino
	}
	return s
}

// certificate is the tls.Config's GetCertificate. A rotation that fails
// (a key that does not match yet, a key left open to others) keeps the old
// certificate: refusing every handshake would be worse.
func (r *certReloader) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var now [2]fileStamp
	for i, path := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(path)
		if err != nil {
			// Mid-rotation, or gone: keep serving what we have.
			return r.cert, nil
		}
		now[i] = stampOf(fi)
	}
	if now == r.loaded || now == r.failed {
		return r.cert, nil
	}
	if err := r.load(); err != nil {
		r.failed = now
		r.log.Warn("TLS certificate changed but cannot be loaded; serving the old one", "err", err)
	}
	return r.cert, nil
}

// load reads the key pair and makes it the one served. Called with mu held
// (or before the reloader is shared).
func (r *certReloader) load() error {
	certPEM, certStamp, err := readStamped(r.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, keyStamp, err := readKey(r.keyFile)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("--tls-cert %s and --tls-key %s: %w", r.certFile, r.keyFile, err)
	}
	leaf := cert.Leaf // parsed by X509KeyPair
	reloaded := r.cert != nil
	r.cert, r.loaded = &cert, [2]fileStamp{certStamp, keyStamp}
	msg := "TLS certificate loaded"
	if reloaded {
		msg = "TLS certificate reloaded"
	}
	r.log.Info(msg, "file", r.certFile, "subject", leaf.Subject.String(), "names", certNames(leaf), "not_after", leaf.NotAfter)
	if time.Now().After(leaf.NotAfter) {
		r.log.Warn("TLS certificate has expired; clients will refuse it", "file", r.certFile, "not_after", leaf.NotAfter)
	}
	return nil
}

// readKey reads the private key, refusing a file that group or others may
// access: whoever reads it can pose as the daemon and collect its callers'
// bearer tokens. The mode is checked on the file that is then read.
func readKey(path string) ([]byte, fileStamp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("--tls-key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("--tls-key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fileStamp{}, fmt.Errorf("--tls-key %s has mode %#o, open to group or others; chmod go-rwx it", path, perm)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("--tls-key: %w", err)
	}
	return data, stampOf(fi), nil
}

func readStamped(path string) ([]byte, fileStamp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileStamp{}, err
	}
	data, err := io.ReadAll(f)
	return data, stampOf(fi), err
}

func certNames(c *x509.Certificate) []string {
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}

// tlsListener is tls.NewListener, plus the answer net/http gives a client
// that speaks plain HTTP to its TLS port: net/http does that only for
// connections it sees as *tls.Conn, and the server's connection limiter
// wraps them. Without it such a client sees only a closed connection.
type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return serverConn{tls.Server(c, l.cfg)}, nil
}

// serverConn is a server-side *tls.Conn. Its promoted NetConn method
// returns the TCP connection, which the server's connContext unwraps to.
type serverConn struct{ *tls.Conn }

func (c serverConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		_ = re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		re.Conn.Close()
	}
	return n, err
}

// looksLikeHTTP reports whether the first five bytes of a connection are
// those of an HTTP request (as net/http's check of the same name).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}
