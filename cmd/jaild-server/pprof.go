package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/internal/command"
)

// profileFlags turn on Go's profilers, for performance work; both are off
// by default. The front end serves net/http/pprof on a loopback address of
// its own (never the API's listener: profiles show request data); the
// worker, the lean binary without net/http, writes a CPU profile of its
// whole life to a file when it exits.
var profileFlags = []cli.Flag{
	&cli.StringFlag{Name: "pprof", EnvVars: []string{"JAILD_PPROF"}, Usage: "serve the front end's Go profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (default: off)"},
	&cli.StringFlag{Name: "worker-cpu-profile", EnvVars: []string{"JAILD_WORKER_CPU_PROFILE"}, Usage: "file the worker writes a CPU profile of its life to when it exits (default: off)"},
}

// startPprof serves the front end's profiles if --pprof is set, and
// returns what stops it.
func startPprof(c *cli.Context, log *slog.Logger) (stop func(), err error) {
	addr := c.String("pprof")
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, command.UsageError("--pprof %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, command.UsageError("--pprof %q: profiles are served on a loopback address only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, command.UsageError("--pprof: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener", "err", err)
		}
	}()
	log.Info(fmt.Sprintf("serving Go profiles on http://%s/debug/pprof/", ln.Addr()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
