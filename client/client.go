package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jaild/jaild/api"
)

// Client calls a jaild daemon, over TCP or a unix socket. It is what
// `jaild remote` and the load generator use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// Options configure New. Exactly one of Server and Socket is
// required.
type Options struct {
	// Server is the daemon's base URL, "http://127.0.0.1:8080". A trailing
	// /run or /raw (the RUN_REMOTE_SERVER form of the policy-runner convention) is ignored.
	Server string
	// Socket is the path of the daemon's unix socket.
	Socket string
	// Token is sent as a bearer token if non-empty. New refuses to
	// send it over plain http:// to a host that is not loopback (see
	// ErrCleartextToken) unless InsecurePlaintext is set.
	Token string
	// InsecurePlaintext allows Token over plain http:// off loopback, for
	// a daemon behind a TLS-terminating proxy on a trusted network.
	InsecurePlaintext bool
	// RootCAs, if non-nil, are the only certificate authorities trusted
	// for an https:// Server, as with curl --cacert (see ReadCAFile); nil
	// means the system's.
	RootCAs *x509.CertPool
	// Transport overrides the HTTP transport (tests, load generation); it
	// cannot be combined with RootCAs.
	Transport http.RoundTripper
}

// ErrCleartextToken is New's refusal to send a bearer token over
// plain http:// to a host that is not loopback: anyone on the path could
// read it and run commands as its owner.
var ErrCleartextToken = errors.New("refusing to send a bearer token in cleartext over http:// to a host that is not loopback")

// New checks o and returns a Client.
func New(o Options) (*Client, error) {
	c := &Client{token: o.Token}
	tr := o.Transport
	switch {
	case o.Server != "" && o.Socket != "":
		return nil, errors.New("client: server URL and socket are mutually exclusive")
	case o.RootCAs != nil && o.Transport != nil:
		return nil, errors.New("client: RootCAs and Transport are mutually exclusive")
	case o.RootCAs != nil && o.Socket != "":
		return nil, errors.New("client: RootCAs are for an https:// server URL, not a socket")
	case o.Socket != "":
		// The host part of the URL is a placeholder: every connection
		// goes to the socket.
		c.base = "http://jaild"
		if tr == nil {
			socket := o.Socket
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.Proxy = nil
			t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			}
			tr = t
		}
	case o.Server != "":
		u, err := url.Parse(o.Server)
		if err != nil {
			return nil, fmt.Errorf("client: server URL: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("client: server URL %q: want http://HOST:PORT or https://HOST:PORT", o.Server)
		}
		if u.Scheme == "http" && o.RootCAs != nil {
			return nil, fmt.Errorf("client: RootCAs are for an https:// server URL, not %s", o.Server)
		}
		if u.Scheme == "http" && o.Token != "" && !o.InsecurePlaintext && !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("client: %s: %w", u.Host, ErrCleartextToken)
		}
		u.Path = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/raw"), "/run")
		u.RawQuery, u.Fragment = "", ""
		c.base = strings.TrimSuffix(u.String(), "/")
	default:
		return nil, errors.New("client: no server URL or socket given")
	}
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The daemon is local or explicitly named: an HTTP proxy from
		// the environment would only leak commands and tokens.
		t.Proxy = nil
		if o.RootCAs != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs}
		}
		tr = t
	}
	// No overall timeout: /raw streams for as long as the command runs,
	// and runs are bounded by their own timeout on the server.
	c.hc = &http.Client{Transport: tr}
	return c, nil
}

// ReadTokenFile reads a client token: the first line that is neither blank
// nor a comment, either TOKEN or NAME:TOKEN (so that a daemon's one-line
// token file can be shared with its client).
func ReadTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, tok, ok := strings.Cut(line, ":"); ok {
			return tok, nil
		}
		return line, nil
	}
	return "", fmt.Errorf("read token file %s: no token in it", path)
}

// ReadCAFile reads PEM certificates of the authorities to trust, for
// Options.RootCAs: a private CA's, or a self-signed daemon
// certificate itself.
func ReadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("read CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// isLoopback reports whether host, a URL's host name, is a loopback
// address or localhost. Other names are not resolved: what the connection
// resolves later need not be what was checked now.
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// APIError is an error answer of the daemon, or an error event of /raw
// (Status 0 then).
type APIError struct {
	Status int
	api.ErrorResponse
	// RetryAfter is the daemon's hint for 429 answers.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("run failed: %s (%s)", e.Text(), e.Code)
	}
	return fmt.Sprintf("daemon answered %d %s: %s (%s)", e.Status, http.StatusText(e.Status), e.Text(), e.Code)
}

// IsSessionLost reports whether err is the daemon's answer that the
// session's node is gone (410 session_lost, in a fleet): its workspace and
// files are lost, and retrying cannot help; create a new session.
func IsSessionLost(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == api.CodeSessionLost
}

// Run calls POST /run.
func (c *Client) Run(ctx context.Context, req *api.Request) (*api.Response, error) {
	resp, err := c.post(ctx, "/run", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out api.Response
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("client: decode /run answer: %w", err)
	}
	return &out, nil
}

// Raw calls POST /raw, writes the stdout and stderr events' data to stdout
// and stderr as they arrive, and returns the exit event. An error event is
// returned as an *APIError; a stream cut off before its final event as an
// error wrapping io.ErrUnexpectedEOF. Cancelling ctx closes the connection,
// which kills the sandbox.
func (c *Client) Raw(ctx context.Context, req *api.Request, stdout, stderr io.Writer) (*api.Event, error) {
	resp, err := c.post(ctx, "/raw", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/x-ndjson" {
		return nil, fmt.Errorf("client: /raw answered %q, not an NDJSON stream", mt)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.Event
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("client: /raw stream ended before the exit event: %w", err)
		}
		switch ev.Event {
		case api.EventStdout, api.EventStderr:
			w := stdout
			if ev.Event == api.EventStderr {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(ev.Data); err != nil {
					return nil, fmt.Errorf("client: write %s: %w", ev.Event, err)
				}
			}
		case api.EventExit:
			if ev.ExitCode == nil || ev.Verdict == nil {
				return nil, errors.New("client: exit event without exit code or verdict")
			}
			return &ev, nil
		case api.EventError:
			e := api.NewErrorResponse(ev.Code, ev.Message)
			e.Denial = ev.Denial
			return nil, &APIError{ErrorResponse: *e}
		}
		// start, and kinds added later, carry nothing to act on.
	}
}

// post sends req and returns a 2xx answer, or the error answer as *APIError.
func (c *Client) post(ctx context.Context, path string, req *api.Request) (*http.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode request: %w", err)
	}
	return c.do(ctx, http.MethodPost, path, bytes.NewReader(body), "application/json", nil)
}

// do sends a request (body may be nil) and returns a 2xx answer, or the
// error answer as *APIError.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, header http.Header) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range header {
		hr.Header[k] = v
	}
	if contentType != "" {
		hr.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	e := &APIError{Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &e.ErrorResponse) != nil || e.Code == "" {
		e.ErrorResponse = api.ErrorResponse{Error: strings.TrimSpace(string(data)), Code: api.CodeInternal}
	}
	// Daemons before command_not_found answered a command not found with
	// 422 not_found; not_found is now only a 404 (no such session or job).
	if e.Code == api.CodeNotFound && e.Status == http.StatusUnprocessableEntity {
		e.Code = api.CodeCommandNotFound
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}
