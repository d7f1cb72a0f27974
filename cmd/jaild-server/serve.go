package main

import (
	"bufio"
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
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/pidfile"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// sweepInterval is how often the daemon's worker looks for sandboxes whose
// jaild died while it runs.
const sweepInterval = time.Minute

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
		&cli.StringFlag{Name: "config", EnvVars: []string{"JAILD_CONFIG"}, Usage: `config file of "flag-name = value" lines`},
		&cli.IntFlag{Name: "max-concurrent", Value: run.DefaultMaxConcurrent, EnvVars: []string{"JAILD_MAX_CONCURRENT"}, Usage: "sandboxes running at once"},
		&cli.IntFlag{Name: "pool", Value: 2, EnvVars: []string{"JAILD_POOL"}, Usage: "sandboxes kept started ahead of time for requests with the default limits (0: none)"},
		&cli.IntFlag{Name: "queue", Aliases: []string{"max-queue"}, Value: 64, EnvVars: []string{"JAILD_QUEUE", "JAILD_MAX_QUEUE"}, Usage: "requests that may wait for a sandbox; beyond it 429 at once"},
		&cli.DurationFlag{Name: "queue-wait", Value: run.DefaultQueueWait, EnvVars: []string{"JAILD_QUEUE_WAIT"}, Usage: "how long a request waits for a sandbox before 429"},
		&cli.DurationFlag{Name: "max-timeout", Value: 10 * time.Minute, EnvVars: []string{"JAILD_MAX_TIMEOUT"}, Usage: "longest timeout a request may ask for (default timeout: " + box.DefaultTimeout.String() + " or this, if lower)"},
		&cli.StringFlag{Name: "max-memory", Value: "1G", EnvVars: []string{"JAILD_MAX_MEMORY"}, Usage: "largest memory limit a request may ask for"},
		&cli.Int64Flag{Name: "max-pids", Value: 1024, EnvVars: []string{"JAILD_MAX_PIDS"}, Usage: "largest pids limit a request may ask for"},
		&cli.Float64Flag{Name: "max-cpus", Value: float64(runtime.NumCPU()), EnvVars: []string{"JAILD_MAX_CPUS"}, Usage: "largest CPU quota a request may ask for, in cores"},
		&cli.StringFlag{Name: "max-tmpfs-size", Value: "256M", EnvVars: []string{"JAILD_MAX_TMPFS_SIZE"}, Usage: "largest working directory and /tmp size a request may ask for"},
		&cli.StringFlag{Name: "max-output", Value: "16M", EnvVars: []string{"JAILD_MAX_OUTPUT"}, Usage: "most output per stream a request may ask to keep"},
		&cli.StringFlag{Name: "max-body", Value: "1M", EnvVars: []string{"JAILD_MAX_BODY"}, Usage: "largest request body (the request's stdin travels in it)"},
		&cli.IntFlag{Name: "max-conns", Value: server.DefaultMaxConns, EnvVars: []string{"JAILD_MAX_CONNS"}, Usage: "open connections at most; a new one takes the place of the longest-idle one, or waits in the kernel's backlog"},
		&cli.IntFlag{Name: "max-conns-per-peer", Value: server.DefaultMaxConnsPerPeer, EnvVars: []string{"JAILD_MAX_CONNS_PER_PEER"}, Usage: "open connections of one remote IP or unix-socket uid at most; beyond it the peer's longest-idle one is closed, or the new one if none is idle (0: no cap)"},
		&cli.Int64Flag{Name: "min-body-rate", Value: server.DefaultMinBodyRate, EnvVars: []string{"JAILD_MIN_BODY_RATE"}, Usage: "slowest a request body may arrive, in bytes/s on average after --body-rate-grace; a slower one is cut with 408 (0: no minimum)"},
		&cli.DurationFlag{Name: "body-rate-grace", Value: server.DefaultBodyRateGrace, EnvVars: []string{"JAILD_BODY_RATE_GRACE"}, Usage: "how long a request body may take before --min-body-rate applies"},
		&cli.StringFlag{Name: "audit-log", Value: "-", EnvVars: []string{"JAILD_AUDIT_LOG"}, Usage: `file to append one JSON line per run to; "-" is stderr, "off" none`},
		&cli.BoolFlag{Name: "audit-command", EnvVars: []string{"JAILD_AUDIT_COMMAND"}, Usage: "put each run's command in the audit log, not only its SHA-256"},
		&cli.DurationFlag{Name: "grace", Value: server.DefaultShutdownGrace, EnvVars: []string{"JAILD_GRACE"}, Usage: "on SIGTERM, once drained, how long running commands may finish before they are killed"},
		&cli.DurationFlag{Name: "drain-timeout", Value: defaultDrainTimeout, EnvVars: []string{"JAILD_DRAIN_TIMEOUT"}, Usage: "on SIGTERM or jaild drain, how long sessions in use are served (new sessions and one-shot runs get 503) before the shutdown; 0: no drain"},
		&cli.DurationFlag{Name: "drain-idle", Value: defaultDrainIdle, EnvVars: []string{"JAILD_DRAIN_IDLE"}, Usage: "while draining, a session that runs nothing for this long is removed"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"JAILD_LOG_FORMAT"}, Usage: `format of the daemon's log on stderr: "text" or "json"`},
		&cli.BoolFlag{Name: "mcp", Value: true, EnvVars: []string{"JAILD_MCP"}, Usage: "serve MCP (Streamable HTTP) at /mcp; --mcp=false turns it off"},
		&cli.StringFlag{Name: "shell-path", Value: "/bin/bash", EnvVars: []string{"JAILD_SHELL_PATH"}, Usage: "shell inside the sandbox that runs the MCP bash tool's command lines"},
		mcpToolsFlag(),
		&cli.StringFlag{Name: "mcp-max-output", Value: fmt.Sprint(server.DefaultMCPMaxOutput), EnvVars: []string{"JAILD_MCP_MAX_OUTPUT", "MCP_EXEC_MAX_OUTPUT_BYTES"}, Usage: "characters of each stream an MCP bash or execute result keeps (MCP_EXEC_MAX_OUTPUT_BYTES is read as characters too), at most a quarter of --max-output (bytes: a character takes up to 4); beyond it head and tail are kept with a marker"},
		&cli.StringSliceFlag{Name: "allowed-origin", Aliases: []string{"mcp-allowed-origin"}, EnvVars: []string{"JAILD_ALLOWED_ORIGINS", "JAILD_MCP_ALLOWED_ORIGINS"}, Usage: "browser origin (https://app.example.com) allowed to call the API besides loopback ones (repeatable)"},
		&cli.StringSliceFlag{Name: "allowed-host", EnvVars: []string{"JAILD_ALLOWED_HOSTS"}, Usage: "host name requests may address the daemon by, besides loopback names, IP addresses and the --listen name (repeatable; \"*\": any); against DNS rebinding"},
		&cli.StringFlag{Name: "max-output-memory", Value: "64M", EnvVars: []string{"JAILD_MAX_OUTPUT_MEMORY"}, Usage: "memory the output of all running requests may take (each holds twice its max output until answered); beyond it requests queue"},
	}, slices.Concat(policyFlags, sessionFlags, []cli.Flag{mcpSessionFlag}, mcpSessionFlags, filesFlags, command.EgressFlags, command.DaemonEgressFlags, command.ManagerFlags, profileFlags, fleetFlags)...),
	Action:       serveAction,
	OnUsageError: command.OnUsageError,
}

func serveAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return command.UsageError("jaild serve takes no arguments")
	}
	if path := c.String("config"); path != "" {
		if err := applyConfigFile(c, path); err != nil {
			return command.UsageError("%v", err)
		}
	}
	log, err := serveLogger(c)
	if err != nil {
		return err
	}
	max, err := serveMaxima(c)
	if err != nil {
		return err
	}
	maxBody, err := command.SizeFlag(c, "max-body")
	if err != nil {
		return err
	}
	adm, err := admitOptions(c, max.MaxOutput)
	if err != nil {
		return err
	}
	limitHeap(adm.MaxOutputMemory)
	sessCfg, err := sessionConfig(c, log)
	if err != nil {
		return err
	}
	// In a fleet, the ids of sessions and MCP sessions name this daemon.
	fleet, trustedProxies, err := fleetOptions(c, maxBody, log)
	if err != nil {
		return err
	}
	if fleet != nil {
		sessCfg.NewID = fleet.NewID
	}
	mcpIdle, err := mcpSessionLimits(c, &sessCfg)
	if err != nil {
		return err
	}
	filesOpts, err := filesOptions(c, log)
	if err != nil {
		return err
	}
	mcpSess, err := mcpSessionsOn(c)
	if err != nil {
		return err
	}
	var mcpOpts *server.MCPOptions
	if c.Bool("mcp") {
		o, err := serveMCPOptions(c, max, log)
		if err != nil {
			return err
		}
		if fleet != nil {
			o.SessionID = fleet.NewID
		}
		mcpOpts = &o
	}
	if c.Duration("grace") <= 0 || c.Int("max-conns") <= 0 {
		return command.UsageError("--max-conns and --grace must be positive")
	}
	if c.Duration("drain-timeout") < 0 || c.Duration("drain-idle") < 0 {
		return command.UsageError("--drain-timeout and --drain-idle must not be negative")
	}
	perPeer := c.Int("max-conns-per-peer")
	switch {
	case perPeer < 0:
		return command.UsageError("--max-conns-per-peer %d: must not be negative (0: no cap)", perPeer)
	case perPeer == 0:
		perPeer = -1
	}
	minRate := c.Int64("min-body-rate")
	switch {
	case minRate < 0:
		return command.UsageError("--min-body-rate %d: must not be negative (0: no minimum)", minRate)
	case c.Duration("body-rate-grace") <= 0:
		return command.UsageError("--body-rate-grace %v: must be positive", c.Duration("body-rate-grace"))
	case minRate == 0:
		minRate = -1
	}
	var tokens *server.Tokens
	if path := c.String("token-file"); path != "" {
		if tokens, err = server.LoadTokens(path); err != nil {
			return command.UsageError("%v", err)
		}
	}
	// Every flag is checked before the daemon binds its address or
	// builds anything.
	egOpts, egCfg, err := daemonEgressFlags(c, log)
	if err != nil {
		return err
	}
	ln, err := serveListener(c, tokens != nil, log)
	if err != nil {
		return err
	}
	defer ln.Close()
	stopPprof, err := startPprof(c, log)
	if err != nil {
		return err
	}
	defer stopPprof()

	audit, closeAudit, err := openAudit(c, log)
	if err != nil {
		return err
	}
	defer closeAudit()

	// The sandboxes are built by a worker process, the lean jaild, so
	// that their init is not this binary (see internal/worker). Closing
	// it waits until every sandbox is torn down, so that jaild exits only
	// when nothing of it is left on the host. The pool's sandboxes get
	// the limits of a request that asks for none, under the operator's
	// maxima.
	defaults, _, _ := max.Defaults()
	w, err := startWorker(c, log, c.String("log-format"), defaults, sweepInterval)
	if err != nil {
		return err
	}
	defer w.Close()
	// jaild drain finds the daemon of a state dir through its pid file.
	pf, err := pidfile.Create(filepath.Join(c.String("state-dir"), command.DaemonPidFile))
	if err != nil {
		log.Warn("no pid file: jaild drain cannot reach this daemon (send it SIGUSR1)", "err", err)
	} else {
		defer pf.Close()
	}
	fh, filesCgroup, err := newFilesHandler(c, filesOpts)
	if err != nil {
		return err
	}
	defer filesCgroup.Close()

	// The metrics exist before the policy engine, whose first load they
	// record.
	metrics := run.NewMetrics()
	pol, closePolicy, err := openPolicy(c, log, metrics.PolicyObserver())
	if err != nil {
		return err
	}
	defer closePolicy()
	eg := daemonEgress(egOpts, egCfg, audit, pol)

	// The sessions' workspaces are the worker's; they are removed before
	// the worker stops.
	sessions, err := newSessions(sessCfg, w)
	if err != nil {
		return err
	}
	defer sessions.Close()

	cfg := server.Config{
		Base:        w,
		WorkerExits: w.Exits,
		Sessions:    sessions,
		Chain:       run.ChainOptions{Max: max, Admission: adm, Audit: audit, Policy: pol, Egress: eg, WorkDir: sessCfg.WorkDir},
		Server: server.Options{
			Tokens:         tokens,
			Metrics:        metrics,
			Health:         runnerHealth(w),
			Policy:         healthOfPolicy(pol),
			Files:          fh,
			AllowedHosts:   allowedHosts(c),
			AllowedOrigins: c.StringSlice("allowed-origin"),
			Logger:         log,
			MaxBodyBytes:   maxBody,
			MaxConns:       c.Int("max-conns"),
			ShutdownGrace:  c.Duration("grace"),
			// Zero there is the default; no cap (--max-conns-per-peer 0) is -1.
			MaxConnsPerPeer: perPeer,
			MinBodyRate:     minRate, // likewise
			BodyRateGrace:   c.Duration("body-rate-grace"),
			Fleet:           fleet,
			TrustedProxies:  trustedProxies,
		},
	}
	if mcpOpts != nil {
		if mcpSess {
			mcpOpts.Sessions, mcpOpts.SessionIdle = sessions, mcpIdle
		}
		mcpOpts.Egress = c.Bool("mcp-egress")
		cfg.MCP = mcpOpts
	}
	ctx, kill, drain, stop := signalContexts(log, c.Duration("grace"))
	defer stop()
	cfg.Drain = server.DrainOptions{Timeout: c.Duration("drain-timeout"), Idle: c.Duration("drain-idle"), Start: drain}
	// The fleet's loads are polled until the server has stopped, the
	// drain included: a draining daemon sends new work to its peers.
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		if fleet != nil {
			fleet.Poll(pollCtx)
		}
	}()
	err = cfg.Run(ctx, kill, ln)
	stopPoll()
	<-polled
	if err != nil {
		return cli.Exit(fmt.Sprintf("serve: %v", err), api.ExitInternal)
	}
	if err := sessions.Close(); err != nil {
		log.Warn("removing sessions", "err", err)
	}
	if err := w.Close(); err != nil {
		return cli.Exit(fmt.Sprintf("clean up sandboxes: %v", err), api.ExitInternal)
	}
	log.Info("stopped")
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

func serveLogger(c *cli.Context) (*slog.Logger, error) {
	return command.Logger(c.String("log-format"), c.Bool("debug"))
}

// serveMaxima reads the operator's --max-* flags.
func serveMaxima(c *cli.Context) (run.Maxima, error) {
	var m run.Maxima
	var err error
	if m.Limits, m.MaxOutput, err = command.LimitFlags(c, "max-"); err != nil {
		return m, err
	}
	m.Timeout = c.Duration("max-timeout")
	if m.Timeout <= 0 {
		return m, command.UsageError("--max-timeout must be positive")
	}
	if m.Timeout > box.MaxTimeout {
		return m, command.UsageError("--max-timeout %v: at most %v", m.Timeout, box.MaxTimeout)
	}
	return m, nil
}

// serveMCPOptions gives MCP tool calls the limits an HTTP request gets when
// it asks for none, so that both front ends agree and the chain's maxima
// never refuse a tool call.
func serveMCPOptions(c *cli.Context, max run.Maxima, log *slog.Logger) (server.MCPOptions, error) {
	limits, _, _ := max.Defaults()
	tools, err := mcpTools(c)
	if err != nil {
		return server.MCPOptions{}, err
	}
	maxOutput, err := command.SizeFlag(c, "mcp-max-output")
	if err != nil {
		return server.MCPOptions{}, err
	}
	if maxOutput <= 0 {
		return server.MCPOptions{}, command.UsageError("--mcp-max-output must be positive")
	}
	workDir, err := command.SandboxWorkDir(c)
	if err != nil {
		return server.MCPOptions{}, err
	}
	return server.MCPOptions{
		WorkDir:          workDir,
		Limits:           limits,
		MaxTimeout:       min(max.Timeout, server.MaxMCPTimeout),
		MaxOutput:        min(max.MaxOutput/server.MCPCaptureBytes(1), maxOutput),
		NetworkMaxOutput: min(max.MaxOutput, server.NetworkToolMaxOutput),
		Shell:            c.String("shell-path"),
		Tools:            tools,
		AllowedOrigins:   c.StringSlice("allowed-origin"),
		Logger:           log.With("front", "mcp"),
	}, nil
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

// openAudit opens --audit-log, unless it is "off" (then the log is nil),
// and returns how to close it.
func openAudit(c *cli.Context, log *slog.Logger) (*run.AuditLog, func(), error) {
	path := c.String("audit-log")
	if path == "off" {
		return nil, func() {}, nil
	}
	w, err := run.OpenAuditLog(path, os.Stderr)
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), api.ExitInternal)
	}
	l := run.NewAuditLog(w, run.AuditOptions{LogCommand: c.Bool("audit-command"), Logger: log})
	return l, func() { w.Close() }, nil
}

// admitOptions reads the admission flags. Every run holds twice its
// maximum output: a --max-output-memory below that would refuse requests
// that the maxima allow.
func admitOptions(c *cli.Context, maxOutput int64) (run.AdmitOptions, error) {
	adm := run.AdmitOptions{
		MaxConcurrent: c.Int("max-concurrent"),
		MaxQueue:      c.Int("queue"),
		MaxWait:       c.Duration("queue-wait"),
	}
	var err error
	if adm.MaxOutputMemory, err = command.SizeFlag(c, "max-output-memory"); err != nil {
		return adm, err
	}
	if adm.MaxConcurrent <= 0 || adm.MaxQueue < 0 || adm.MaxWait <= 0 {
		return adm, command.UsageError("--max-concurrent and --queue-wait must be positive, --queue not negative")
	}
	if adm.MaxOutputMemory < 2*maxOutput {
		return adm, command.UsageError("--max-output-memory %d is less than twice the largest output a run may keep (%d per stream)", adm.MaxOutputMemory, maxOutput)
	}
	return adm, nil
}

// limitHeap sets the Go heap's soft limit to the output memory plus room
// for the daemon itself, unless GOMEMLIMIT chose one: left to GOGC alone, a
// heap holding the output of several large runs would grow to twice that
// before the garbage collector ran.
func limitHeap(outputMemory int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(outputMemory + heapRoom)
	}
}

// heapRoom is the heap the daemon may use besides the output it holds.
const heapRoom = 32 << 20

// allowedHosts are the --allowed-host names plus the --listen host, if it
// is a name.
func allowedHosts(c *cli.Context) []string {
	hosts := c.StringSlice("allowed-host")
	if h, _, err := net.SplitHostPort(c.String("listen")); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	return hosts
}

// applyConfigFile sets every flag named in the config file that was not
// given on the command line or in the environment.
func applyConfigFile(c *cli.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	known := map[string]bool{}
	for _, fl := range c.Command.Flags {
		for _, n := range fl.Names() {
			known[n] = true
		}
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if unq, err := strconv.Unquote(val); err == nil && strings.HasPrefix(val, `"`) {
			val = unq
		}
		switch {
		case !ok || key == "":
			return fmt.Errorf("config %s:%d: want flag-name = value", path, n)
		case !known[key] || key == "config":
			return fmt.Errorf("config %s:%d: unknown setting %q", path, n, key)
		case c.IsSet(key):
			continue // the command line or the environment wins
		}
		if err := c.Set(key, val); err != nil {
			return fmt.Errorf("config %s:%d: %s: %w", path, n, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}
