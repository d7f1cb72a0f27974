package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// Config is a whole daemon: the run chain around the jail and the HTTP
// server (with MCP) in front of it. cmd/jaild-server fills it from flags;
// Run does the wiring.
type Config struct {
	// Base builds the sandboxes: the jail, or the daemon's worker.
	Base run.Base
	// Chain configures the run chain every front end shares.
	Chain run.ChainOptions
	// Sessions, if not nil, serves sessions (the HTTP endpoints and runs
	// with session_id) over the chain; Run sets Chain.Sessions to it.
	// The caller closes it once Run has returned.
	Sessions *session.Manager
	// MCP, if not nil, serves the MCP tools at /mcp over the same chain.
	MCP *MCPOptions
	// Server configures the HTTP server; Run sets its Runner, Metrics,
	// Audit and MCP from the fields above.
	Server Options
	// Drain configures the drain that precedes a shutdown.
	Drain DrainOptions
	// WorkerExits, if not nil, counts the exits of the process that
	// builds the sandboxes, for jaild_worker_exits_total.
	WorkerExits func() uint64
}

// DrainOptions configure how a daemon drains (Server.Drain) before it
// shuts down: it refuses new work, serves its sessions until each is idle
// or deleted, and then shuts down as on a stop without drain.
type DrainOptions struct {
	// Timeout bounds the drain; sessions still open then are removed by
	// the shutdown. Zero means no drain: a stop shuts down at once.
	Timeout time.Duration
	// Idle is how long a session may run nothing, while draining, before
	// it is removed. Zero removes idle sessions at once.
	Idle time.Duration
	// Start, if not nil, starts a drain without a stop signal (jaild
	// drain); the daemon still exits once it is drained.
	Start <-chan struct{}
}

// Run builds the chain and the server and serves on ln until ctx is done,
// then shuts down as Server.Shutdown does within Server.ShutdownGrace: a
// kill that is done cuts the grace period short (a second signal). It
// returns when every run it started has ended.
func (c Config) Run(ctx, kill context.Context, ln net.Listener) error {
	c.Chain.Metrics = c.Server.Metrics
	if c.Chain.Metrics == nil {
		c.Chain.Metrics = run.NewMetrics()
	}
	runner, err := c.Runner()
	if err != nil {
		return err
	}
	opts := c.Server
	opts.Runner, opts.Metrics, opts.Audit = runner, c.Chain.Metrics, c.Chain.Audit
	opts.Sessions, opts.SessionMax = c.Sessions, c.Chain.Max
	opts.SessionEgress = c.Chain.Egress
	opts.PolicyEngine = c.Chain.Policy
	if c.MCP != nil {
		opts.MCP = NewMCPHandler(runner, c.MCPOptions())
	}
	srv, err := New(opts)
	if err != nil {
		return err
	}
	opts.Metrics.ObserveDaemon(c.WorkerExits, srv.Draining)
	if c, ok := opts.MCP.(io.Closer); ok {
		// Its MCP sessions' jaild sessions go once the server has stopped.
		defer c.Close()
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-kill.Done():
			expired, cancel := context.WithCancel(context.Background())
			cancel()
			srv.Shutdown(expired)
		case <-done:
		}
	}()
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.Drain.Start:
		case <-done:
			return
		}
		c.drain(srv, kill, done)
		stop()
	}()
	return srv.Serve(stopping, ln)
}

// Runner builds the run chain that Run serves, over Base with Chain and
// Sessions, for a front end that serves it itself (MCP over stdio).
func (c Config) Runner() (run.Runner, error) {
	c.Chain.Sessions = c.Sessions
	r, err := run.Chain(c.Base, c.Chain)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return r, nil
}

// drain drains srv and its sessions until none is left, the drain's
// timeout, a kill or done.
func (c Config) drain(srv *Server, kill context.Context, done <-chan struct{}) {
	if c.Drain.Timeout <= 0 || !srv.Drain() {
		return
	}
	if c.Sessions == nil {
		return
	}
	c.Sessions.Drain(c.Drain.Idle)
	log := srv.log
	timeout := time.NewTimer(c.Drain.Timeout)
	defer timeout.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n := c.Sessions.Len()
		if n == 0 {
			log.Info("drained: no session left")
			return
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			log.Warn("drain timeout: removing the sessions left", "sessions", n, "timeout", c.Drain.Timeout)
			return
		case <-kill.Done():
			return
		case <-done:
			return
		}
	}
}

// MCPOptions are c.MCP with the chain's maxima and audit log, for a front
// end that serves the tools itself (MCP over stdio: NewMCPServer).
func (c Config) MCPOptions() MCPOptions {
	mo := *c.MCP
	mo.Max, mo.Audit = c.Chain.Max, c.Chain.Audit
	return mo
}

// SessionService makes and changes c.Sessions' sessions by the chain's
// rules (maxima, egress, audit log, policy): what MCPOptions.Sessions
// takes, so that MCP sessions are made as POST /sessions' are.
func (c Config) SessionService() *run.Sessions {
	return &run.Sessions{Manager: c.Sessions, Max: c.Chain.Max, Egress: c.Chain.Egress,
		Metrics: c.Chain.Metrics, Audit: c.Chain.Audit, Policy: c.Chain.Policy}
}
