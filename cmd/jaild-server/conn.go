package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os/signal"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/command"
)

// connFlags say how to reach a daemon; every client command (remote,
// session, jobs, cp) takes them, with the same environment variables.
var connFlags = []cli.Flag{
	&cli.StringFlag{Name: "server", Value: "http://127.0.0.1:8080", EnvVars: []string{"JAILD_SERVER", "RUN_REMOTE_SERVER"}, Usage: "daemon URL; a /raw or /run path is dropped, so RUN_REMOTE_SERVER, the policy-runner convention's full /raw URL, works as it is"},
	&cli.StringFlag{Name: "socket", EnvVars: []string{"JAILD_SOCKET"}, Usage: "daemon unix socket; wins over --server"},
	&cli.StringFlag{Name: "token-file", EnvVars: []string{"JAILD_TOKEN_FILE"}, Usage: "file holding the bearer token (TOKEN or NAME:TOKEN on its first line)"},
	&cli.StringFlag{Name: "ca-file", EnvVars: []string{"JAILD_CA_FILE"}, Usage: "trust only the CA certificates in this PEM file for an https:// --server (default: the system's)"},
	&cli.BoolFlag{Name: "insecure-plaintext", EnvVars: []string{"JAILD_INSECURE_PLAINTEXT"}, Usage: "send the token over plain http:// to a host that is not loopback"},
}

// withConnFlags is connFlags followed by a command's own flags.
func withConnFlags(own ...cli.Flag) []cli.Flag {
	return append(slices.Clone(connFlags), own...)
}

// newClient builds the client that connFlags describe.
func newClient(c *cli.Context) (*client.Client, error) {
	var err error
	// --socket, when set, wins over --server (which always has a value).
	opts := client.Options{Socket: c.String("socket"), InsecurePlaintext: c.Bool("insecure-plaintext")}
	if opts.Socket == "" {
		opts.Server = c.String("server")
	}
	if path := c.String("token-file"); path != "" {
		if opts.Token, err = client.ReadTokenFile(path); err != nil {
			return nil, command.UsageError("%v", err)
		}
	}
	if path := c.String("ca-file"); path != "" {
		if opts.Socket != "" || !strings.HasPrefix(strings.ToLower(opts.Server), "https://") {
			return nil, command.UsageError("--ca-file is for an https:// --server")
		}
		if opts.RootCAs, err = client.ReadCAFile(path); err != nil {
			return nil, command.UsageError("--ca-file: %v", err)
		}
	}
	cl, err := client.New(opts)
	if errors.Is(err, client.ErrCleartextToken) {
		return nil, command.UsageError("--server %s: refusing to send the token in cleartext to a host that is not loopback; use https:// (with --ca-file for a private CA) or --insecure-plaintext", opts.Server)
	}
	if err != nil {
		return nil, command.UsageError("%v", err)
	}
	return cl, nil
}

// signalContext is cancelled by Ctrl-C, SIGTERM or SIGHUP.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
}

// Exit statuses of the session, jobs and cp commands (besides a job's own
// status, which jobs --follow exits with): 1 when the daemon refused the
// request (no such session or file, ...), ExitUsage for a bad command line
// or authentication, ExitInternal when the daemon cannot be reached or
// failed.
const exitRefused = 1

// apiErrorOf is the daemon's refusal in err, or, when err is not one, the
// exit for it: interrupted (ctx ended), a certificate the client does not
// trust (with the flag that fixes it), or the daemon unreachable.
func apiErrorOf(ctx context.Context, err error, interrupted string) (*client.APIError, error) {
	if ctx.Err() != nil {
		return nil, cli.Exit(interrupted, api.ExitInternal)
	}
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) {
		return nil, cli.Exit(err.Error()+" (--ca-file FILE trusts the CA that signed the daemon's certificate)", api.ExitInternal)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return nil, cli.Exit(err.Error(), api.ExitInternal)
	}
	return ae, nil
}

// callError is the exit of a client command whose call failed.
func callError(ctx context.Context, err error) error {
	ae, exit := apiErrorOf(ctx, err, "interrupted")
	switch {
	case ae == nil:
		return exit
	case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
		return cli.Exit(ae.Error(), api.ExitUsage)
	case ae.Status/100 == 4 || ae.Status == http.StatusInsufficientStorage:
		return cli.Exit(fmt.Sprintf("%s (%s)", ae.Text(), ae.Code), exitRefused)
	}
	return cli.Exit(ae.Error(), api.ExitInternal)
}
