//go:build !jaild_lean

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/server"
)

// sweepInterval is how often the daemon looks for sandboxes whose jaild
// died while it runs.
const sweepInterval = time.Minute

var serveCommand = &cli.Command{
	Name:  "serve",
	Usage: serveUsage,
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

On SIGTERM, SIGINT or SIGHUP jaild stops accepting, lets running commands
finish for up to --grace, then kills them, removes their sandboxes and exits
0. A second signal kills at once. Sandboxes of a jaild that died (SIGKILL) are
swept when it starts again with the same --state-dir.

Configuration: flags beat JAILD_* environment variables (MCP_BIND_ADDR works
for --listen), which beat --config FILE, which beats the defaults shown here.
The config file holds "flag-name = value" lines, e.g. "max-concurrent = 16",
with # comments; duration values take a unit (10s), sizes one of K, M, G.`,
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", EnvVars: []string{"JAILD_LISTEN", "MCP_BIND_ADDR"}, Usage: "TCP address to serve on; anything but loopback needs --token-file"},
		&cli.StringFlag{Name: "socket", EnvVars: []string{"JAILD_SOCKET"}, Usage: "serve on this unix socket (mode 0660) instead of --listen"},
		&cli.StringFlag{Name: "socket-group", EnvVars: []string{"JAILD_SOCKET_GROUP"}, Usage: "group (name or id) that owns --socket and may use it (default root's)"},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"JAILD_TOKEN_FILE"}, Usage: "file of NAME:TOKEN bearer tokens; required off loopback"},
		&cli.StringFlag{Name: "config", EnvVars: []string{"JAILD_CONFIG"}, Usage: `config file of "flag-name = value" lines`},
		&cli.IntFlag{Name: "max-concurrent", Value: server.DefaultMaxConcurrent, EnvVars: []string{"JAILD_MAX_CONCURRENT"}, Usage: "sandboxes running at once"},
		&cli.IntFlag{Name: "pool", Value: 2, EnvVars: []string{"JAILD_POOL"}, Usage: "sandboxes kept started ahead of time for requests with the default limits (0: none)"},
		&cli.IntFlag{Name: "queue", Aliases: []string{"max-queue"}, Value: 64, EnvVars: []string{"JAILD_QUEUE", "JAILD_MAX_QUEUE"}, Usage: "requests that may wait for a sandbox; beyond it 429 at once"},
		&cli.DurationFlag{Name: "queue-wait", Value: server.DefaultQueueWait, EnvVars: []string{"JAILD_QUEUE_WAIT"}, Usage: "how long a request waits for a sandbox before 429"},
		&cli.DurationFlag{Name: "max-timeout", Value: 10 * time.Minute, EnvVars: []string{"JAILD_MAX_TIMEOUT"}, Usage: "longest timeout a request may ask for (default timeout: " + jail.DefaultTimeout.String() + " or this, if lower)"},
		&cli.StringFlag{Name: "max-memory", Value: "1G", EnvVars: []string{"JAILD_MAX_MEMORY"}, Usage: "largest memory limit a request may ask for"},
		&cli.Int64Flag{Name: "max-pids", Value: 1024, EnvVars: []string{"JAILD_MAX_PIDS"}, Usage: "largest pids limit a request may ask for"},
		&cli.Float64Flag{Name: "max-cpus", Value: float64(runtime.NumCPU()), EnvVars: []string{"JAILD_MAX_CPUS"}, Usage: "largest CPU quota a request may ask for, in cores"},
		&cli.StringFlag{Name: "max-tmpfs-size", Value: "256M", EnvVars: []string{"JAILD_MAX_TMPFS_SIZE"}, Usage: "largest /work and /tmp size a request may ask for"},
		&cli.StringFlag{Name: "max-output", Value: "16M", EnvVars: []string{"JAILD_MAX_OUTPUT"}, Usage: "most output per stream a request may ask to keep"},
		&cli.StringFlag{Name: "max-body", Value: "1M", EnvVars: []string{"JAILD_MAX_BODY"}, Usage: "largest request body (the request's stdin travels in it)"},
		&cli.IntFlag{Name: "max-conns", Value: server.DefaultMaxConns, EnvVars: []string{"JAILD_MAX_CONNS"}, Usage: "open connections at most; a new one takes the place of the longest-idle one, or waits in the kernel's backlog"},
		&cli.IntFlag{Name: "max-conns-per-peer", Value: server.DefaultMaxConnsPerPeer, EnvVars: []string{"JAILD_MAX_CONNS_PER_PEER"}, Usage: "open connections of one remote IP or unix-socket uid at most; beyond it the peer's longest-idle one is closed, or the new one if none is idle (0: no cap)"},
		&cli.StringFlag{Name: "audit-log", Value: "-", EnvVars: []string{"JAILD_AUDIT_LOG"}, Usage: `file to append one JSON line per run to; "-" is stderr, "off" none`},
		&cli.BoolFlag{Name: "audit-command", EnvVars: []string{"JAILD_AUDIT_COMMAND"}, Usage: "put each run's command in the audit log, not only its SHA-256"},
		&cli.DurationFlag{Name: "grace", Value: server.DefaultShutdownGrace, EnvVars: []string{"JAILD_GRACE"}, Usage: "on SIGTERM, how long running commands may finish before they are killed"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"JAILD_LOG_FORMAT"}, Usage: `format of the daemon's log on stderr: "text" or "json"`},
		&cli.BoolFlag{Name: "mcp", Value: true, EnvVars: []string{"JAILD_MCP"}, Usage: "serve MCP (Streamable HTTP) at /mcp; --mcp=false turns it off"},
		&cli.StringFlag{Name: "shell-path", Value: "/bin/bash", EnvVars: []string{"JAILD_SHELL_PATH"}, Usage: "shell inside the sandbox that runs the MCP bash tool's command lines"},
		&cli.StringSliceFlag{Name: "mcp-allowed-origin", EnvVars: []string{"JAILD_MCP_ALLOWED_ORIGINS"}, Usage: "browser origin allowed to call /mcp besides loopback ones (repeatable)"},
	}, managerFlags...),
	Action:       serveAction,
	OnUsageError: onUsageError,
}

func serveAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageError("jaild serve takes no arguments")
	}
	if path := c.String("config"); path != "" {
		if err := applyConfigFile(c, path); err != nil {
			return usageError("%v", err)
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
	maxBody, err := sizeFlag(c, "max-body")
	if err != nil {
		return err
	}
	adm := server.AdmitOptions{
		MaxConcurrent: c.Int("max-concurrent"),
		MaxQueue:      c.Int("queue"),
		MaxWait:       c.Duration("queue-wait"),
	}
	if adm.MaxConcurrent <= 0 || adm.MaxQueue < 0 || adm.MaxWait <= 0 || c.Duration("grace") <= 0 || c.Int("max-conns") <= 0 {
		return usageError("--max-concurrent, --max-conns, --queue-wait and --grace must be positive, --queue not negative")
	}
	perPeer := c.Int("max-conns-per-peer")
	switch {
	case perPeer < 0:
		return usageError("--max-conns-per-peer %d: must not be negative (0: no cap)", perPeer)
	case perPeer == 0:
		perPeer = -1
	}
	var tokens *server.Tokens
	if path := c.String("token-file"); path != "" {
		if tokens, err = server.LoadTokens(path); err != nil {
			return usageError("%v", err)
		}
	}
	ln, err := serveListener(c, tokens != nil)
	if err != nil {
		return err
	}
	defer ln.Close()

	audit, err := openAudit(c)
	if err != nil {
		return err
	}
	if audit != nil {
		defer audit.Close()
	}

	m, err := newManager(c)
	if err != nil {
		return err
	}
	// Close waits until every sandbox is torn down, so that jaild exits
	// only when nothing of it is left on the host.
	defer m.Close()

	// The pool's sandboxes get the limits of a request that asks for
	// none, under the operator's maxima.
	probe := jail.Spec{Command: jail.Command{Args: []string{"true"}}}
	if err := max.Apply(&probe); err != nil {
		return usageError("--pool: %v", err)
	}
	runnerBase, closePool, err := startPool(c, m, probe.Limits)
	if err != nil {
		return err
	}
	defer closePool()

	// A one-shot jaild run that is killed while the daemon runs leaves an
	// orphan that no restart will find soon; sweep for such orphans now and
	// then, not only at start.
	sweepDone := make(chan struct{})
	sweepStopped := make(chan struct{})
	go func() {
		defer close(sweepStopped)
		t := time.NewTicker(sweepInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if n, err := m.Sweep(); err != nil {
					log.Warn("sweeping orphaned sandboxes", "found", n, "err", err)
				} else if n > 0 {
					log.Info("swept orphaned sandboxes", "count", n)
				}
			case <-sweepDone:
				return
			}
		}
	}()
	defer func() { close(sweepDone); <-sweepStopped }()

	metrics := server.NewMetrics()
	co := server.ChainOptions{
		Max:          max,
		Admission:    adm,
		AuditOptions: server.AuditOptions{LogCommand: c.Bool("audit-command"), Logger: log},
		Metrics:      metrics,
	}
	if audit != nil {
		co.Audit = audit
	}
	runner, err := server.Chain(runnerBase, co)
	if err != nil {
		return usageError("%v", err)
	}

	var mcpHandler http.Handler
	if c.Bool("mcp") {
		mcpHandler = server.NewMCPHandler(runner, serveMCPOptions(c, max, log))
	}
	srv, err := server.New(server.Options{
		Runner:        runner,
		Tokens:        tokens,
		Metrics:       metrics,
		Health:        jailHealth(m),
		MCP:           mcpHandler,
		Logger:        log,
		MaxBodyBytes:  maxBody,
		MaxConns:      c.Int("max-conns"),
		ShutdownGrace: c.Duration("grace"),

		// Zero there is the default; no cap (--max-conns-per-peer 0) is -1.
		MaxConnsPerPeer: perPeer,
	})
	if err != nil {
		return usageError("%v", err)
	}

	// The first signal starts a graceful shutdown; a second one cuts the
	// grace period short. Sandboxes are killed and removed either way.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case sig := <-sigc:
			log.Info("signal received, shutting down", "signal", sig.String(), "grace", c.Duration("grace"))
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigc:
			log.Warn("second signal, killing running commands", "signal", sig.String())
			expired, stop := context.WithCancel(context.Background())
			stop()
			srv.Shutdown(expired)
		case <-done:
		}
	}()
	err = srv.Serve(ctx, ln)
	close(done)
	<-watcher
	if err != nil {
		return cli.Exit(fmt.Sprintf("serve: %v", err), exitInternal)
	}
	closePool()
	if err := m.Close(); err != nil {
		return cli.Exit(fmt.Sprintf("clean up sandboxes: %v", err), exitInternal)
	}
	log.Info("stopped")
	return nil
}

// startPool starts the --pool sandboxes with limits l and returns the runner
// to use and how to stop the pool (before the Manager is closed; stopping
// twice is harmless).
func startPool(c *cli.Context, m *jail.Manager, l jail.Limits) (server.Runner, func(), error) {
	n := c.Int("pool")
	if n < 0 {
		return nil, nil, usageError("--pool %d: must not be negative", n)
	}
	if n == 0 {
		return m, func() {}, nil
	}
	pool, err := m.NewPool(n, l)
	if err != nil {
		return nil, nil, usageError("--pool: %v", err)
	}
	return pool, func() { _ = pool.Close() }, nil
}

func serveLogger(c *cli.Context) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if c.Bool("debug") {
		opts.Level = slog.LevelDebug
	}
	switch f := c.String("log-format"); f {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, usageError("--log-format %q: want text or json", f)
	}
}

// serveMaxima reads the operator's --max-* flags.
func serveMaxima(c *cli.Context) (server.Maxima, error) {
	var m server.Maxima
	var err error
	if m.Limits, m.MaxOutput, err = limitFlags(c, "max-"); err != nil {
		return m, err
	}
	m.Timeout = c.Duration("max-timeout")
	if m.Timeout <= 0 {
		return m, usageError("--max-timeout must be positive")
	}
	if m.Timeout > jail.MaxTimeout {
		return m, usageError("--max-timeout %v: at most %v", m.Timeout, jail.MaxTimeout)
	}
	return m, nil
}

// serveMCPOptions gives MCP tool calls the limits an HTTP request gets when
// it asks for none, so that both front ends agree and the chain's maxima
// never refuse a tool call.
func serveMCPOptions(c *cli.Context, max server.Maxima, log *slog.Logger) server.MCPOptions {
	var defaults jail.Spec
	defaults.Args = []string{"true"}
	_ = max.Apply(&defaults) // cannot fail: the maxima were validated
	return server.MCPOptions{
		Limits:         defaults.Limits,
		MaxTimeout:     min(max.Timeout, server.MaxMCPTimeout),
		MaxOutput:      min(max.MaxOutput, server.DefaultMCPMaxOutput),
		Shell:          c.String("shell-path"),
		AllowedOrigins: c.StringSlice("mcp-allowed-origin"),
		Logger:         log.With("front", "mcp"),
	}
}

// serveListener opens the unix socket or the TCP address. Without tokens
// it refuses any TCP address that is not loopback: the API runs arbitrary
// commands, and network peers cannot be told apart.
func serveListener(c *cli.Context, haveTokens bool) (net.Listener, error) {
	if path := c.String("socket"); path != "" {
		if c.IsSet("listen") {
			return nil, usageError("give --listen or --socket, not both")
		}
		return listenUnix(path, c.String("socket-group"))
	}
	if c.IsSet("socket-group") {
		return nil, usageError("--socket-group needs --socket")
	}
	addr := c.String("listen")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageError("--listen %q: %v", addr, err)
	}
	if !haveTokens && !isLoopbackHost(host) {
		return nil, usageError("--listen %s is not a loopback address: refusing to serve without --token-file", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("listen on %s: %v", addr, err), exitInternal)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !haveTokens && !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, usageError("--listen %s bound %s, not loopback: refusing to serve without --token-file", addr, tcp)
	}
	return ln, nil
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
			return nil, usageError("--socket-group %q: no such group", group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, usageError("--socket %s exists and is not a socket", path)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, cli.Exit(fmt.Sprintf("--socket %s: another daemon is serving on it", path), exitInternal)
		}
		if err := os.Remove(path); err != nil {
			return nil, cli.Exit(fmt.Sprintf("remove stale socket: %v", err), exitInternal)
		}
	}
	// The umask keeps the socket closed to others between its creation
	// and the chmod below (connecting needs write permission).
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("listen on %s: %v", path, err), exitInternal)
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, cli.Exit(fmt.Sprintf("chown socket: %v", err), exitInternal)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, cli.Exit(fmt.Sprintf("chmod socket: %v", err), exitInternal)
	}
	return ln, nil
}

func openAudit(c *cli.Context) (io.WriteCloser, error) {
	path := c.String("audit-log")
	if path == "off" {
		return nil, nil
	}
	w, err := server.OpenAuditLog(path, os.Stderr)
	if err != nil {
		return nil, cli.Exit(err.Error(), exitInternal)
	}
	return w, nil
}

// jailHealth checks that a sandbox can run: what /healthz reports. The
// server caches its result, so it runs at most every few seconds.
func jailHealth(m *jail.Manager) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := m.Run(ctx, &jail.Spec{Command: jail.Command{Args: []string{"true"}, Timeout: 10 * time.Second}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("test command true exited %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		return nil
	}
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
