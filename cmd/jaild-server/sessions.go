package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/internal/worker"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/server"
	"github.com/jaild/jaild/session"
	"github.com/jaild/jaild/session/files"
)

// sessionFlags configure the sessions of serve and mcp (docs/sessions.md).
var sessionFlags = []cli.Flag{
	command.WorkspaceRootFlag,
	&cli.IntFlag{Name: "max-sessions", Value: session.DefaultMaxSessions, EnvVars: []string{"JAILD_MAX_SESSIONS"}, Usage: "sessions of the whole daemon at most; beyond it POST /sessions answers 409"},
	&cli.IntFlag{Name: "max-sessions-per-caller", Value: session.DefaultMaxPerOwner, EnvVars: []string{"JAILD_MAX_SESSIONS_PER_CALLER"}, Usage: "sessions of one caller (token, unix uid or TCP peer address) at most"},
	&cli.DurationFlag{Name: "session-ttl", Value: session.DefaultTTL, EnvVars: []string{"JAILD_SESSION_TTL"}, Usage: "idle time (nothing running) after which a session and its workspace are removed; a session may ask for its own, up to --session-max-lifetime"},
	&cli.DurationFlag{Name: "session-max-lifetime", Value: session.DefaultMaxLifetime, EnvVars: []string{"JAILD_SESSION_MAX_LIFETIME"}, Usage: "age at which a session is removed whatever runs in it"},
	&cli.StringFlag{Name: "workspace-size", Value: "1G", EnvVars: []string{"JAILD_WORKSPACE_SIZE"}, Usage: "size of a session's workspace (its working directory, a tmpfs counted as memory), the default and the most a session may ask for"},
	&cli.IntFlag{Name: "max-jobs", Value: session.DefaultMaxJobs, EnvVars: []string{"JAILD_MAX_JOBS"}, Usage: "background jobs a session keeps, running or ended (the oldest ended one makes room); beyond it 409"},
	&cli.DurationFlag{Name: "max-job-timeout", Value: session.DefaultMaxJobTimeout, EnvVars: []string{"JAILD_MAX_JOB_TIMEOUT"}, Usage: "longest a background job may run, and its timeout if it asks for none"},
	&cli.BoolFlag{Name: "session-prestart", Value: true, EnvVars: []string{"JAILD_SESSION_PRESTART"}, Usage: "keep one sandbox started on each session's workspace for its next call or job (a process, a cgroup and a few pages per idle session); false: every session call builds its sandbox"},
	&cli.DurationFlag{Name: "session-prestart-idle", Value: jail.DefaultPrestartIdle, EnvVars: []string{"JAILD_SESSION_PRESTART_IDLE"}, Usage: "a session idle this long goes dormant: the sandbox kept started for it (--session-prestart) is destroyed, so that idle sessions do not slow every other sandbox's start; its next call builds a fresh one, as a one-shot run without the pool does, and the session keeps one started again (0: never dormant)"},
	&cli.IntFlag{Name: "session-prestart-builds", EnvVars: []string{"JAILD_SESSION_PRESTART_BUILDS"}, Usage: "sessions' sandboxes (--session-prestart) built at once while no call waits for them (a new session's first, a replacement, a busy session's extra ones); the others wait their turn, so that a burst of new sessions does not take every CPU from the calls and creates callers wait for; a call that waits for its session's sandbox lets it through at once (0: half the CPUs the worker uses, its GOMAXPROCS: in a container, its CPU limit; at least one)"},
}

// filesFlags bound the files API's transfers (serve only: jaild mcp has no
// files API).
var filesFlags = []cli.Flag{
	&cli.StringFlag{Name: "max-upload", Value: "1G", EnvVars: []string{"JAILD_MAX_UPLOAD"}, Usage: "largest PUT body of the files API (a file or a tar); beyond it 413 (the workspace's quota applies anyway: 507)"},
	&cli.StringFlag{Name: "files-min-rate", Value: "16K", EnvVars: []string{"JAILD_FILES_MIN_RATE"}, Usage: "slowest a files API transfer may send or read, in bytes per second: each 64 KiB must move within --files-stall plus 64 KiB at this rate, or the transfer is cut"},
	&cli.DurationFlag{Name: "files-stall", Value: files.DefaultStall, EnvVars: []string{"JAILD_FILES_STALL"}, Usage: "how long a files API transfer may move nothing (see --files-min-rate)"},
}

// mcpSessionFlag chooses whether each MCP session gets a jaild session.
var mcpSessionFlag = &cli.StringFlag{Name: "mcp-session", Value: "auto", EnvVars: []string{"JAILD_MCP_SESSION"}, Usage: `"auto": each MCP session gets a session of its own at its first tool call (files, cd, exports and background tasks carry across calls); "none": every tool call is one-shot`}

// mcpSessionFlags bound the workspaces of serve's MCP sessions (jaild mcp
// serves one MCP session, whose workspace lives as long as it).
var mcpSessionFlags = []cli.Flag{
	&cli.DurationFlag{Name: "mcp-session-idle", Value: server.DefaultMCPSessionIdle, EnvVars: []string{"JAILD_MCP_SESSION_IDLE"}, Usage: "an MCP session's workspace is removed once its client has held no request open (a call, or the event stream clients keep open while they run) and nothing has run in it for this long; the next call of that MCP session says so and starts afresh"},
	&cli.IntFlag{Name: "max-mcp-sessions-per-caller", Value: session.DefaultMaxAttachedPerOwner, EnvVars: []string{"JAILD_MAX_MCP_SESSIONS_PER_CALLER"}, Usage: "MCP sessions' workspaces of one caller at most, counted apart from its --max-sessions-per-caller; a new one first evicts the caller's workspace idle the longest (no client connected, nothing running), else the call is refused"},
}

// mcpSessionLimits reads mcpSessionFlags into cfg, and returns the idle
// time of an MCP session's workspace.
func mcpSessionLimits(c *cli.Context, cfg *session.Config) (time.Duration, error) {
	idle, n := c.Duration("mcp-session-idle"), c.Int("max-mcp-sessions-per-caller")
	switch {
	case idle <= 0 || n <= 0:
		return 0, command.UsageError("--mcp-session-idle and --max-mcp-sessions-per-caller must be positive")
	case idle > cfg.MaxLifetime:
		return 0, command.UsageError("--mcp-session-idle %v exceeds --session-max-lifetime %v", idle, cfg.MaxLifetime)
	}
	cfg.MaxAttachedPerOwner = n
	return idle, nil
}

// mcpSessionsOn reads --mcp-session: whether MCP sessions get sessions.
// With --mcp-egress, each MCP session's jaild session then gets egress
// (server.MCPOptions.SessionEgress).
func mcpSessionsOn(c *cli.Context) (bool, error) {
	switch c.String("mcp-session") {
	case "auto":
		return true, nil
	case "none":
		return false, nil
	}
	return false, command.UsageError("--mcp-session %q: want auto or none", c.String("mcp-session"))
}

// sessionConfig reads the session flags.
func sessionConfig(c *cli.Context, log *slog.Logger) (session.Config, error) {
	cfg := session.Config{
		MaxSessions:   c.Int("max-sessions"),
		MaxPerOwner:   c.Int("max-sessions-per-caller"),
		MaxJobs:       c.Int("max-jobs"),
		TTL:           c.Duration("session-ttl"),
		MaxLifetime:   c.Duration("session-max-lifetime"),
		MaxJobTimeout: c.Duration("max-job-timeout"),
		NoPrestart:    !c.Bool("session-prestart"),
		Logger:        log.With("front", "sessions"),
	}
	var err error
	if cfg.WorkDir, err = command.SandboxWorkDir(c); err != nil {
		return cfg, err
	}
	ws, err := command.SizeFlag(c, "workspace-size")
	if err != nil {
		return cfg, err
	}
	cfg.WorkspaceBytes = ws
	switch {
	case cfg.MaxSessions <= 0 || cfg.MaxPerOwner <= 0 || cfg.MaxJobs <= 0:
		return cfg, command.UsageError("--max-sessions, --max-sessions-per-caller and --max-jobs must be positive")
	case cfg.TTL <= 0 || cfg.MaxLifetime <= 0 || cfg.MaxJobTimeout <= 0 || ws <= 0:
		return cfg, command.UsageError("--session-ttl, --session-max-lifetime, --max-job-timeout and --workspace-size must be positive")
	case cfg.MaxJobTimeout > box.MaxTimeout:
		return cfg, command.UsageError("--max-job-timeout %v: at most %v", cfg.MaxJobTimeout, box.MaxTimeout)
	case cfg.TTL > cfg.MaxLifetime:
		return cfg, command.UsageError("--session-ttl %v exceeds --session-max-lifetime %v", cfg.TTL, cfg.MaxLifetime)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, command.UsageError("%v", err)
	}
	return cfg, nil
}

// filesOptions reads the flags of serve's files API (session/files), which
// the server mounts behind its authentication with the caller's session,
// held for the request, in the request's context.
func filesOptions(c *cli.Context, log *slog.Logger) (files.Options, error) {
	max, err := command.SizeFlag(c, "max-upload")
	if err != nil {
		return files.Options{}, err
	}
	if max <= 0 {
		return files.Options{}, command.UsageError("--max-upload must be positive")
	}
	rate, err := command.SizeFlag(c, "files-min-rate")
	if err != nil {
		return files.Options{}, err
	}
	if rate <= 0 || c.Duration("files-stall") <= 0 {
		return files.Options{}, command.UsageError("--files-min-rate and --files-stall must be positive")
	}
	return files.Options{MaxUpload: max, MinRate: rate, Stall: c.Duration("files-stall"), Logger: log.With("front", "files")}, nil
}

// newFilesHandler serves the files API with o, its writes charged to the
// files cgroup of the sandboxes' parent (cgroup.Parent.Files), which the
// worker has made: the front end joins it, and its claim keeps the parent
// while a restarted worker takes over. Close the Parent after the handler's
// last request and before the worker, which removes the parent.
func newFilesHandler(c *cli.Context, o files.Options) (*files.Handler, *cgroup.Parent, error) {
	parent, err := cgroup.Open(cgroup.Options{
		Path:    c.String("cgroup-parent"),
		LockDir: filepath.Join(c.String("state-dir"), "cgroup-locks"),
		Keep:    true,
	})
	if err != nil {
		return nil, nil, command.ExitError(fmt.Errorf("%w: %w", box.ErrUnsupported, err))
	}
	g, err := parent.Files()
	if err != nil {
		_ = parent.Close()
		return nil, nil, command.ExitError(fmt.Errorf("%w: %w", box.ErrUnsupported, err))
	}
	o.Charge = g
	return server.NewFilesHandler(o), parent, nil
}

// newSessions starts the session manager over the worker: its workspaces
// are the worker's. Close it before the worker.
func newSessions(cfg session.Config, w *worker.Client) (*session.Manager, error) {
	m, err := session.New(workerJail{w}, cfg)
	if err != nil {
		return nil, command.UsageError("%v", err)
	}
	return m, nil
}

// workerJail makes the sessions' workspaces in the worker.
type workerJail struct{ w *worker.Client }

func (j workerJail) NewWorkspace(ctx context.Context, size int64, proxy bool, prestart *box.Limits) (session.Workspace, error) {
	ws, err := j.w.NewWorkspace(ctx, size, proxy, prestart)
	if err != nil {
		return nil, err
	}
	return ws, nil
}
