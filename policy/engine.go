package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Mode says what a deny does.
type Mode string

const (
	// Enforce refuses what the policy denies.
	Enforce Mode = "enforce"
	// Shadow runs everything and logs what the policy would deny, to try
	// a policy on real traffic before enforcing it.
	Shadow Mode = "shadow"
)

// ParseMode reads a --policy-mode value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Enforce, Shadow:
		return Mode(s), nil
	case "":
		return Enforce, nil
	}
	return "", fmt.Errorf("policy mode %q: want enforce or shadow", s)
}

// DefaultDebounce is how long a reload waits for the directory to settle:
// editors and config management write several files, or one in steps.
const DefaultDebounce = 150 * time.Millisecond

// Options configure an Engine. The zero value of each field is documented.
type Options struct {
	// Dir holds the policy set: every .rego file under it. Required.
	Dir string
	// Mode is Enforce when empty.
	Mode Mode
	// Shell says who decides the commands of a shell string (ShellMode);
	// ShellAuto when empty.
	Shell ShellMode
	// Resolver resolves commands to files; nil resolves on the host as a
	// sandbox over the host's /usr would (NewRoot("/")).
	Resolver Resolver
	// Logger gets one line per reload; nil discards.
	Logger *slog.Logger
	// DecisionLog, if not nil, gets a JSON line per decision.
	DecisionLog io.Writer
	// LogEnv logs env values in DecisionLog; without it they are
	// redacted, as env is where callers put secrets.
	LogEnv bool
	// Observer, if not nil, is told of every decision and reload, for
	// metrics.
	Observer Observer
	// Debounce is DefaultDebounce when zero.
	Debounce time.Duration
	// NoWatch turns live reload off (jaild policy eval, tests).
	NoWatch bool
}

// Observer receives what metrics are made of; the server implements it
// over Prometheus, which this package does not import. Calls may come from
// many goroutines.
type Observer interface {
	// Decided is called once per decision with its Result and how long
	// evaluation took (resolution and parsing included).
	Decided(result Result, shadow bool, eval time.Duration)
	// Loaded is called after every load with the active revision (empty
	// in deny-all) and the load's error, nil if it loaded. A load that
	// fails because the directory is missing keeps the last good set:
	// then both are set and denyAll is false.
	Loaded(revision string, denyAll bool, err error)
}

// Engine decides requests against the policy set in a directory, and
// swaps in each new valid set as the directory changes. It is safe for
// concurrent use.
type Engine struct {
	opts Options
	cur  atomic.Pointer[state]
	log  *slog.Logger
	dlog *decisionLog

	stop    chan struct{}
	wg      sync.WaitGroup
	closeMu sync.Once
}

// state is one outcome of a load: a set, or the error that put the
// engine in deny-all.
type state struct {
	set    *set
	err    error
	loaded time.Time
	// cache keeps the set's recent decisions; nil when nondet names a
	// builtin that makes them depend on more than the input (see
	// decisioncache.go).
	cache  *decisionCache
	nondet string
	// missing is the error of the last load when it found no directory
	// and kept this set, the last good one.
	missing error
	// shell is the set's ShellMode: ShellWhole or ShellEach.
	shell ShellMode
}

// Open loads opts.Dir and starts watching it. A set that fails to load is
// no error: the engine denies everything, says why in Status and every
// denial, and recovers on the next valid set. The error is for options
// that are wrong.
func Open(opts Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("policy: no policy directory")
	}
	mode, err := ParseMode(string(opts.Mode))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	opts.Mode = mode
	if opts.Shell, err = ParseShellMode(string(opts.Shell)); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if opts.Resolver == nil {
		opts.Resolver = NewRoot("/")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	e := &Engine{opts: opts, log: opts.Logger, stop: make(chan struct{})}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if opts.DecisionLog != nil {
		e.dlog = &decisionLog{w: opts.DecisionLog, env: opts.LogEnv}
	}
	if !opts.NoWatch {
		if err := e.watch(); err != nil {
			return nil, err
		}
	}
	e.reload() // after the watch is set, so no change is missed
	return e, nil
}

// Close stops watching. Decisions still work on the last set.
func (e *Engine) Close() error {
	var err error
	e.closeMu.Do(func() {
		close(e.stop)
		e.wg.Wait() // the loop closes its watcher
	})
	return err
}

// Status is the engine's state, for /healthz and jaild doctor.
type Status struct {
	Dir  string `json:"dir"`
	Mode Mode   `json:"mode"`
	// Shell is the active set's ShellMode (ShellWhole or ShellEach);
	// empty in deny-all.
	Shell ShellMode `json:"shell_mode,omitempty"`
	// Revision is the active set's: a hash of its files' paths and
	// contents. Empty in deny-all.
	Revision string `json:"revision,omitempty"`
	Files    int    `json:"files,omitempty"`
	// DenyAll is on while no valid set is loaded; Error says why. Error
	// is also set, with the last good Revision still active, while the
	// directory is missing (see Engine.reload).
	DenyAll bool      `json:"deny_all"`
	Error   string    `json:"error,omitempty"`
	Loaded  time.Time `json:"loaded"`
}

// Status reports the active set or why there is none.
func (e *Engine) Status() Status {
	st := e.cur.Load()
	s := Status{Dir: e.opts.Dir, Mode: e.opts.Mode, Loaded: st.loaded}
	if st.err != nil {
		s.DenyAll, s.Error = true, st.err.Error()
	} else {
		s.Revision, s.Files, s.Shell = st.set.revision, len(st.set.files), st.shell
	}
	if st.missing != nil {
		s.Error = st.missing.Error()
	}
	return s
}

// reload loads the directory and swaps the outcome in whole. A set that
// does not load puts the engine in deny-all, except when the directory
// itself is missing and a set was loaded before: as OPA's bundle loader
// keeps the last activated bundle when a download fails, the last good set
// stays active and Status and the Observer report the error. A directory
// is missing for a moment when it is replaced (mv P P.old; mv P.new P), and
// while it is restored; denying everything then would make every deploy an
// outage. Deleting the files (an empty directory) is deny-all.
func (e *Engine) reload() {
	s, err := loadDir(context.Background(), e.opts.Dir)
	if prev := e.cur.Load(); err != nil && prev != nil && prev.set != nil {
		if _, serr := os.Stat(e.opts.Dir); errors.Is(serr, fs.ErrNotExist) {
			st := *prev
			st.missing = err
			e.cur.Store(&st)
			e.log.Error("policy directory is missing: keeping the last good revision", "dir", e.opts.Dir, "revision", prev.set.revision, "err", err)
			if e.opts.Observer != nil {
				e.opts.Observer.Loaded(prev.set.revision, false, err)
			}
			return
		}
	}
	st := &state{set: s, err: err, loaded: time.Now()}
	if err == nil {
		st.shell = shellMode(e.opts.Shell, s.modules)
		if st.nondet = nondeterministic(s.modules); st.nondet == "" {
			st.cache = &decisionCache{}
		}
	}
	prev := e.cur.Swap(st)
	switch {
	case err != nil:
		e.log.Error("policy deny-all: the policy set does not load", "dir", e.opts.Dir, "err", err)
	case prev == nil || prev.set == nil || prev.set.revision != s.revision:
		args := []any{"dir", e.opts.Dir, "revision", s.revision, "files", len(s.files), "mode", e.opts.Mode, "shell_mode", st.shell}
		if st.nondet != "" {
			args = append(args, "decisions_cached", false, "because", st.nondet)
		}
		e.log.Info("policy loaded", args...)
	}
	if e.opts.Observer != nil {
		rev := ""
		if s != nil {
			rev = s.revision
		}
		e.opts.Observer.Loaded(rev, err != nil, err)
	}
}
