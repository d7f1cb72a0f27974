package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/pidfile"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
	"github.com/jaild/jaild/session/files"
)

var serveCommand = &cli.Command{
	Name:  "serve",
	Usage: command.ServeUsage,
	Description: `Serves the jaild HTTP API (GET /openapi.yaml describes it) on a loopback
address (default 127.0.0.1:8080) or a unix socket (--socket, mode 0660). Every
request runs in a fresh sandbox; requests may ask for less than the --max-*
limits below, never more. At most --max-concurrent sandboxes run at once and
at most --queue requests wait, each up to --queue-wait; beyond that the answer
is 429 with Retry-After. One JSON line per run goes to the --audit-log.

Authentication: with --token-file (lines NAME:TOKEN, at least 16 characters
of [A-Za-z0-9._~+/=-], file not accessible to other users) every endpoint but
/healthz and /openapi.yaml needs "Authorization: Bearer TOKEN". Without it
anyone who can connect may run commands, so jaild serve then refuses any
address but loopback; a unix socket is guarded by its mode and group.

TLS: with --tls-cert and --tls-key (PEM files; the key not accessible to
group or others) jaild serves HTTPS, TLS 1.3 and HTTP/1.1 only, and loads
the files again when they change (certificate rotation needs no restart).
Off loopback it refuses plain HTTP, which would carry the tokens in
cleartext, unless --insecure-plaintext is given (behind a TLS proxy).

On SIGTERM, SIGINT or SIGHUP jaild stops accepting, lets running commands
finish for up to --grace, then kills them, removes their sandboxes and exits
0. A second signal kills at once. Sandboxes of a jaild that died (SIGKILL) are
swept when it starts again with the same --state-dir.

Configuration: flags beat JAILD_* environment variables (MCP_BIND_ADDR works
for --listen), which beat --config FILE, which beats the defaults shown here.
The config file holds "flag-name = value" lines, e.g. "max-concurrent = 16",
with # comments; duration values take a unit (10s), sizes one of K, M, G.`,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", EnvVars: []string{"JAILD_LISTEN", "MCP_BIND_ADDR"}, Usage: "TCP address to serve on; anything but loopback needs --token-file and --tls-cert"},
		&cli.StringFlag{Name: "socket", EnvVars: []string{"JAILD_SOCKET"}, Usage: "serve on this unix socket (mode 0660) instead of --listen"},
		&cli.StringFlag{Name: "socket-group", EnvVars: []string{"JAILD_SOCKET_GROUP"}, Usage: "group (name or id) that owns --socket and may use it (default root's)"},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"JAILD_TOKEN_FILE"}, Usage: "file of NAME:TOKEN bearer tokens; required off loopback"},
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"JAILD_TLS_CERT"}, Usage: "serve HTTPS with this PEM certificate (chain); reloaded when it changes"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"JAILD_TLS_KEY"}, Usage: "PEM private key of --tls-cert, not accessible to group or others"},
		&cli.BoolFlag{Name: "insecure-plaintext", EnvVars: []string{"JAILD_INSECURE_PLAINTEXT"}, Usage: "allow plain HTTP off loopback, tokens in cleartext (e.g. behind a TLS-terminating proxy)"},
		&cli.StringFlag{Name: "max-memory", Value: "1G", EnvVars: []string{"JAILD_MAX_MEMORY"}, Usage: "largest memory limit a request may ask for"},
		&cli.Int64Flag{Name: "max-pids", Value: 1024, EnvVars: []string{"JAILD_MAX_PIDS"}, Usage: "largest pids limit a request may ask for"},
		&cli.Float64Flag{Name: "max-cpus", Value: float64(runtime.NumCPU()), EnvVars: []string{"JAILD_MAX_CPUS"}, Usage: "largest CPU quota a request may ask for, in cores"},
		&cli.StringFlag{Name: "max-tmpfs-size", Value: "256M", EnvVars: []string{"JAILD_MAX_TMPFS_SIZE"}, Usage: "largest working directory and /tmp size a request may ask for"},
		&cli.StringFlag{Name: "max-body", Value: "1M", EnvVars: []string{"JAILD_MAX_BODY"}, Usage: "largest request body (the request's stdin travels in it)"},
		&cli.IntFlag{Name: "max-conns", Value: server.DefaultMaxConns, EnvVars: []string{"JAILD_MAX_CONNS"}, Usage: "open connections at most; a new one takes the place of the longest-idle one, or waits in the kernel's backlog"},
		&cli.IntFlag{Name: "max-conns-per-peer", Value: server.DefaultMaxConnsPerPeer, EnvVars: []string{"JAILD_MAX_CONNS_PER_PEER"}, Usage: "open connections of one remote IP or unix-socket uid at most; beyond it the peer's longest-idle one is closed, or the new one if none is idle (0: no cap)"},
		&cli.Int64Flag{Name: "min-body-rate", Value: server.DefaultMinBodyRate, EnvVars: []string{"JAILD_MIN_BODY_RATE"}, Usage: "slowest a request body may arrive, in bytes/s on average after --body-rate-grace; a slower one is cut with 408 (0: no minimum)"},
		&cli.DurationFlag{Name: "body-rate-grace", Value: server.DefaultBodyRateGrace, EnvVars: []string{"JAILD_BODY_RATE_GRACE"}, Usage: "how long a request body may take before --min-body-rate applies"},
		&cli.DurationFlag{Name: "grace", Value: server.DefaultShutdownGrace, EnvVars: []string{"JAILD_GRACE"}, Usage: "on SIGTERM, once drained, how long running commands may finish before they are killed"},
		&cli.DurationFlag{Name: "drain-timeout", Value: defaultDrainTimeout, EnvVars: []string{"JAILD_DRAIN_TIMEOUT"}, Usage: "on SIGTERM or jaild drain, how long sessions in use are served (new sessions and one-shot runs get 503) before the shutdown; 0: no drain"},
		&cli.DurationFlag{Name: "drain-idle", Value: defaultDrainIdle, EnvVars: []string{"JAILD_DRAIN_IDLE"}, Usage: "while draining, a session that runs nothing for this long is removed"},
		&cli.BoolFlag{Name: "mcp", Value: true, EnvVars: []string{"JAILD_MCP"}, Usage: "serve MCP (Streamable HTTP) at /mcp; --mcp=false turns it off"},
		&cli.StringSliceFlag{Name: "allowed-origin", Aliases: []string{"mcp-allowed-origin"}, EnvVars: []string{"JAILD_ALLOWED_ORIGINS", "JAILD_MCP_ALLOWED_ORIGINS"}, Usage: "browser origin (https://app.example.com) allowed to call the API besides loopback ones (repeatable)"},
		&cli.StringSliceFlag{Name: "allowed-host", EnvVars: []string{"JAILD_ALLOWED_HOSTS"}, Usage: "host name requests may address the daemon by, besides loopback names, IP addresses and the --listen name (repeatable; \"*\": any); against DNS rebinding"},
	}, slices.Concat(mcpSessionFlags, filesFlags, fleetFlags, daemonFlags)...),
	Action:       serveAction,
	OnUsageError: command.OnUsageError,
}

// serveAction reads every flag, binds the address, starts the daemon and
// serves it until a signal stops it.
func serveAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return command.UsageError("jaild serve takes no arguments")
	}
	cfg, err := readDaemonConfig(c, ceilingFlags)
	if err != nil {
		return err
	}
	sc, err := readServeConfig(c, &cfg)
	if err != nil {
		return err
	}
	// Every flag is checked before the daemon binds its address or
	// builds anything.
	ln, err := serveListener(c, sc.server.Tokens != nil, cfg.log)
	if err != nil {
		return err
	}
	defer ln.Close()
	// The metrics exist before the policy engine, whose first load they
	// record.
	sc.server.Metrics = run.NewMetrics()
	d, err := openDaemon(c, cfg, sc.server.Metrics)
	if err != nil {
		return err
	}
	defer d.Close()
	// jaild drain finds the daemon of a state dir through its pid file.
	pf, err := pidfile.Create(filepath.Join(c.String("state-dir"), command.DaemonPidFile))
	if err != nil {
		cfg.log.Warn("no pid file: jaild drain cannot reach this daemon (send it SIGUSR1)", "err", err)
	} else {
		defer pf.Close()
	}
	fh, filesCgroup, err := newFilesHandler(c, sc.files)
	if err != nil {
		return err
	}
	sc.server.Files = fh
	err = serveHTTP(d, sc, ln)
	// After the files API's last request, before the worker.
	_ = filesCgroup.Close()
	if err != nil {
		return err
	}
	if err := d.Close(); err != nil {
		return command.ExitError(err)
	}
	cfg.log.Info("stopped")
	return nil
}

// serveConfig is what serve's own flags add to the daemon: the HTTP
// server, its files API and its drain.
type serveConfig struct {
	server server.Options
	files  files.Options
	drain  server.DrainOptions
	// fleetKeys, in a fleet, are the key files reloaded into
	// server.Fleet while the daemon serves.
	fleetKeys *fleetKeys
}

// readServeConfig reads serve's own flags. The fleet's and the MCP
// sessions' complete d.
func readServeConfig(c *cli.Context, d *daemonConfig) (serveConfig, error) {
	var sc serveConfig
	maxBody, err := command.SizeFlag(c, "max-body")
	if err != nil {
		return sc, err
	}
	// In a fleet, the ids of sessions and MCP sessions name this daemon.
	fleet, trustedProxies, err := fleetOptions(c, maxBody, d.log)
	if err != nil {
		return sc, err
	}
	if fleet != nil {
		d.sessions.NewID = fleet.router.NewID
	}
	mcpIdle, err := mcpSessionLimits(c, &d.sessions)
	if err != nil {
		return sc, err
	}
	if sc.files, err = filesOptions(c, d.log); err != nil {
		return sc, err
	}
	if c.Bool("mcp") {
		d.mcp.SessionIdle = mcpIdle
		d.mcp.AllowedOrigins = c.StringSlice("allowed-origin")
		if fleet != nil {
			d.mcp.SessionID = fleet.router.NewID
		}
	} else {
		d.mcp = nil
	}
	if sc.server, err = readHTTPOptions(c); err != nil {
		return sc, err
	}
	sc.server.Logger, sc.server.MaxBodyBytes = d.log, maxBody
	sc.server.TrustedProxies = trustedProxies
	if fleet != nil {
		sc.server.Fleet, sc.fleetKeys = fleet.router, fleet.keys
	}
	if c.Duration("drain-timeout") < 0 || c.Duration("drain-idle") < 0 {
		return sc, command.UsageError("--drain-timeout and --drain-idle must not be negative")
	}
	sc.drain = server.DrainOptions{Timeout: c.Duration("drain-timeout"), Idle: c.Duration("drain-idle")}
	return sc, nil
}

// readHTTPOptions reads the HTTP server's flags: its tokens, the hosts and
// origins it answers, and its bounds on connections and bodies.
func readHTTPOptions(c *cli.Context) (server.Options, error) {
	o := server.Options{
		AllowedHosts:   allowedHosts(c),
		AllowedOrigins: c.StringSlice("allowed-origin"),
		MaxConns:       c.Int("max-conns"),
		ShutdownGrace:  c.Duration("grace"),
		BodyRateGrace:  c.Duration("body-rate-grace"),
	}
	if o.ShutdownGrace <= 0 || o.MaxConns <= 0 {
		return o, command.UsageError("--max-conns and --grace must be positive")
	}
	// Zero in server.Options is the default; no cap (the flag's 0) is -1.
	switch o.MaxConnsPerPeer = c.Int("max-conns-per-peer"); {
	case o.MaxConnsPerPeer < 0:
		return o, command.UsageError("--max-conns-per-peer %d: must not be negative (0: no cap)", o.MaxConnsPerPeer)
	case o.MaxConnsPerPeer == 0:
		o.MaxConnsPerPeer = -1
	}
	switch o.MinBodyRate = c.Int64("min-body-rate"); { // likewise
	case o.MinBodyRate < 0:
		return o, command.UsageError("--min-body-rate %d: must not be negative (0: no minimum)", o.MinBodyRate)
	case o.BodyRateGrace <= 0:
		return o, command.UsageError("--body-rate-grace %v: must be positive", o.BodyRateGrace)
	case o.MinBodyRate == 0:
		o.MinBodyRate = -1
	}
	if path := c.String("token-file"); path != "" {
		var err error
		if o.Tokens, err = server.LoadTokens(path); err != nil {
			return o, command.UsageError("%v", err)
		}
	}
	return o, nil
}

// serveHTTP serves d with sc on ln until the first stop signal (then a
// drain and a graceful shutdown) or jaild drain, and returns when every
// run it started has ended. The fleet's loads are polled, and its key files
// watched, until then, the drain included: a draining daemon sends new work
// to its peers, and its sessions are still reached through them.
func serveHTTP(d *daemon, sc serveConfig, ln net.Listener) error {
	d.Server = sc.server
	d.Server.Health = runnerHealth(d.worker)
	d.Server.Policy = healthOfPolicy(d.Chain.Policy)
	ctx, kill, drain, stop := signalContexts(d.log, sc.server.ShutdownGrace)
	defer stop()
	d.Drain = sc.drain
	d.Drain.Start = drain
	pollCtx, stopPoll := context.WithCancel(context.Background())
	var polls sync.WaitGroup
	if fleet := sc.server.Fleet; fleet != nil {
		polls.Go(func() { fleet.Poll(pollCtx) })
		polls.Go(func() { sc.fleetKeys.watch(pollCtx, fleet) })
	}
	err := d.Run(ctx, kill, ln)
	stopPoll()
	polls.Wait()
	if err != nil {
		return command.ExitError(fmt.Errorf("serve: %w", err))
	}
	return nil
}

// The drain's defaults: a Kubernetes pod's default grace period is 30 s,
// which the drain and --grace share unless the pod asks for more.
const (
	defaultDrainTimeout = 15 * time.Second
	defaultDrainIdle    = 5 * time.Second
)

// signalContexts are the daemon's signals: ctx ends at the first SIGTERM,
// SIGINT or SIGHUP (drain, then a graceful shutdown), kill at the second
// (the grace period cut short). drain is closed at SIGUSR1 (jaild drain):
// a drain, then the same shutdown. stop releases the signals.
func signalContexts(log *slog.Logger, grace time.Duration) (ctx, kill context.Context, drain <-chan struct{}, stop func()) {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, unix.SIGUSR1)
	ctx, cancel := context.WithCancel(context.Background())
	kill, killNow := context.WithCancel(context.Background())
	drainc := make(chan struct{})
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for stopped, drained := false, false; ; {
			select {
			case <-usr1:
				if !drained {
					log.Info("SIGUSR1: draining, then shutting down")
					close(drainc)
					drained = true
				}
			case sig := <-sigc:
				if stopped {
					log.Warn("second signal, killing running commands", "signal", sig.String())
					killNow()
					return
				}
				log.Info("signal received, draining, then shutting down", "signal", sig.String(), "grace", grace)
				cancel()
				stopped = true
			case <-done:
				return
			}
		}
	}()
	return ctx, kill, drainc, func() {
		close(done)
		<-exited
		signal.Stop(sigc)
		signal.Stop(usr1)
		cancel()
		killNow()
	}
}

// serveListener opens the unix socket or the TCP address, the latter with
// TLS if --tls-cert is given. Off loopback it needs tokens, since the API
// runs arbitrary commands and network peers cannot be told apart, and TLS
// (or --insecure-plaintext), since the tokens would cross the network in
// cleartext. Both are checked before binding and again on the address
// bound.
func serveListener(c *cli.Context, haveTokens bool, log *slog.Logger) (net.Listener, error) {
	certFile, keyFile := c.String("tls-cert"), c.String("tls-key")
	useTLS, plaintext := certFile != "" || keyFile != "", c.Bool("insecure-plaintext")
	switch {
	case (certFile == "") != (keyFile == ""):
		return nil, command.UsageError("--tls-cert and --tls-key go together: give both or neither")
	case useTLS && plaintext:
		return nil, command.UsageError("--insecure-plaintext contradicts --tls-cert and --tls-key: give one or the other")
	}
	if path := c.String("socket"); path != "" {
		if c.IsSet("listen") {
			return nil, command.UsageError("give --listen or --socket, not both")
		}
		if useTLS {
			return nil, command.UsageError("--tls-cert and --tls-key are for --listen; a unix socket needs no TLS")
		}
		return listenUnix(path, c.String("socket-group"))
	}
	if c.IsSet("socket-group") {
		return nil, command.UsageError("--socket-group needs --socket")
	}
	addr := c.String("listen")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, command.UsageError("--listen %q: %v", addr, err)
	}
	if !isLoopbackHost(host) {
		if err := offLoopback(addr, haveTokens, useTLS, plaintext); err != nil {
			return nil, err
		}
	}
	var cfg *tls.Config
	if useTLS {
		if cfg, err = serverTLS(certFile, keyFile, log); err != nil {
			return nil, command.UsageError("%v", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("listen on %s: %v", addr, err), api.ExitInternal)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		if err := offLoopback(fmt.Sprintf("%s (bound %s)", addr, tcp), haveTokens, useTLS, plaintext); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if cfg != nil {
		return tlsListener{Listener: ln, cfg: cfg}, nil
	}
	return ln, nil
}

// offLoopback refuses to serve on a non-loopback address without tokens,
// or with tokens that would travel in cleartext.
func offLoopback(addr string, haveTokens, useTLS, plaintext bool) error {
	switch {
	case !haveTokens:
		return command.UsageError("--listen %s is not a loopback address: refusing to serve without --token-file", addr)
	case !useTLS && !plaintext:
		return command.UsageError("--listen %s is not a loopback address: refusing to send bearer tokens in cleartext; give --tls-cert and --tls-key (or --insecure-plaintext behind a TLS proxy)", addr)
	}
	return nil
}

// isLoopbackHost reports whether every address host resolves to is
// loopback. "" and "0.0.0.0" (all interfaces) are not.
func isLoopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if host == "" {
		return false
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// listenUnix creates the socket mode 0660, owned by root and group. A
// stale socket file of a dead jaild is replaced; a live one is an error.
func listenUnix(path, group string) (net.Listener, error) {
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			g, err = user.LookupGroupId(group)
		}
		if err != nil {
			return nil, command.UsageError("--socket-group %q: no such group", group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, command.UsageError("--socket %s exists and is not a socket", path)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, cli.Exit(fmt.Sprintf("--socket %s: another daemon is serving on it", path), api.ExitInternal)
		}
		if err := os.Remove(path); err != nil {
			return nil, cli.Exit(fmt.Sprintf("remove stale socket: %v", err), api.ExitInternal)
		}
	}
	// The umask keeps the socket closed to others between its creation
	// and the chmod below (connecting needs write permission).
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("listen on %s: %v", path, err), api.ExitInternal)
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, cli.Exit(fmt.Sprintf("chown socket: %v", err), api.ExitInternal)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, cli.Exit(fmt.Sprintf("chmod socket: %v", err), api.ExitInternal)
	}
	return ln, nil
}

// allowedHosts are the --allowed-host names plus the --listen host, if it
// is a name.
func allowedHosts(c *cli.Context) []string {
	hosts := c.StringSlice("allowed-host")
	if h, _, err := net.SplitHostPort(c.String("listen")); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	return hosts
}
