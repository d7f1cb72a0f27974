package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
)

// Defaults for a [Config] whose fields are left zero.
const (
	DefaultMaxSessions         = 64
	DefaultMaxPerOwner         = 8
	DefaultMaxAttachedPerOwner = 8
	DefaultMaxJobs             = 16
	DefaultTTL                 = 30 * time.Minute
	DefaultMaxLifetime         = 24 * time.Hour
	DefaultWorkspaceBytes      = jail.DefaultWorkspaceSize // 1 GiB
	DefaultMaxJobTimeout       = time.Hour
	DefaultReapInterval        = 5 * time.Second
)

// Config configures a [Manager]; each zero field means its Default*.
type Config struct {
	// MaxSessions caps the sessions of the whole daemon.
	MaxSessions int
	// MaxPerOwner caps the sessions of one owner, attached ones
	// (Options.Attached) apart.
	MaxPerOwner int
	// MaxAttachedPerOwner caps the attached sessions of one owner.
	MaxAttachedPerOwner int
	// MaxJobs caps the jobs a session keeps, running or finished; the
	// oldest finished job is forgotten to make room for a new one.
	MaxJobs int
	// TTL is the idle time after which a session expires, unless its
	// Options set another (up to MaxLifetime).
	TTL time.Duration
	// MaxLifetime is when a session expires whatever it runs.
	MaxLifetime time.Duration
	// WorkspaceBytes is a workspace's size unless Options set another;
	// MaxWorkspaceBytes (zero: WorkspaceBytes) caps what Options may ask.
	WorkspaceBytes    int64
	MaxWorkspaceBytes int64
	// MaxJobTimeout caps a background job's timeout, and is the timeout
	// of a job that sets none.
	MaxJobTimeout time.Duration
	// ReapInterval is how often expiry is checked.
	ReapInterval time.Duration
	// WorkDir is where the sandboxes mount the session's workspace: their
	// working directory and HOME, as the jail's (jail.Config.WorkDir).
	// Empty means box.DefaultDir.
	WorkDir string
	// NoPrestart: every call and job of a session builds its sandbox.
	// False (the default): each session keeps one sandbox started on its
	// workspace, with the session's limits, for its next call or job
	// (jail.WithPrestart; see the package doc).
	NoPrestart bool
	// Logger receives warnings; nil discards them.
	Logger *slog.Logger
	// NewID, if not nil, mints session ids (in a fleet: ids that name
	// this daemon, see package route); nil means random uuids. Ids must
	// be unique, unguessable, URL-path safe and at most 128 bytes.
	NewID func() string
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxSessions, DefaultMaxSessions)
	def(&c.MaxPerOwner, DefaultMaxPerOwner)
	def(&c.MaxAttachedPerOwner, DefaultMaxAttachedPerOwner)
	def(&c.MaxJobs, DefaultMaxJobs)
	defD(&c.TTL, DefaultTTL)
	defD(&c.MaxLifetime, DefaultMaxLifetime)
	defD(&c.MaxJobTimeout, DefaultMaxJobTimeout)
	defD(&c.ReapInterval, DefaultReapInterval)
	if c.WorkspaceBytes == 0 {
		c.WorkspaceBytes = DefaultWorkspaceBytes
	}
	if c.MaxWorkspaceBytes == 0 {
		c.MaxWorkspaceBytes = c.WorkspaceBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.WorkDir == "" {
		c.WorkDir = box.DefaultDir
	}
	return c
}

// Validate reports the first field that is negative or inconsistent.
func (c Config) Validate() error {
	switch {
	case c.MaxSessions < 0 || c.MaxPerOwner < 0 || c.MaxAttachedPerOwner < 0 || c.MaxJobs < 0:
		return invalid("session maxima", "must not be negative")
	case c.TTL < 0 || c.MaxLifetime < 0 || c.MaxJobTimeout < 0 || c.ReapInterval < 0:
		return invalid("session durations", "must not be negative")
	case c.MaxJobTimeout > box.MaxTimeout:
		return invalid("max job timeout", "%v exceeds %v", c.MaxJobTimeout, box.MaxTimeout)
	case c.WorkspaceBytes < 0 || c.MaxWorkspaceBytes < 0:
		return invalid("workspace bytes", "must not be negative")
	}
	if c.WorkDir != "" {
		if err := jail.ValidateWorkDir(c.WorkDir); err != nil {
			return err
		}
	}
	c = c.withDefaults()
	switch {
	case c.TTL > c.MaxLifetime:
		return invalid("session ttl", "%v exceeds the maximum lifetime %v", c.TTL, c.MaxLifetime)
	case c.WorkspaceBytes > c.MaxWorkspaceBytes:
		return invalid("workspace bytes", "%d exceeds the maximum of %d", c.WorkspaceBytes, c.MaxWorkspaceBytes)
	}
	return nil
}

// Manager keeps the sessions of a daemon. It is safe for concurrent use.
type Manager struct {
	jail Jail
	cfg  Config
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	pending  map[place]int // places reserved by Creates under way
	closed   bool
	// drainIdle, once Drain set it, is how long a session may sit idle
	// before it is removed; Create refuses new sessions meanwhile.
	drainIdle time.Duration

	stop   chan struct{}
	reaper sync.WaitGroup
	// removals are the expired sessions being removed; Close waits for
	// them after the reaper has stopped.
	removals sync.WaitGroup
}

// New starts a Manager over j, with its expiry goroutine; Close stops it.
func New(j Jail, cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Manager{
		jail:     j,
		cfg:      cfg,
		log:      cfg.Logger,
		sessions: make(map[string]*Session),
		pending:  make(map[place]int),
		stop:     make(chan struct{}),
	}
	m.reaper.Add(1)
	go m.reap()
	return m, nil
}

// WorkDir is where the sandboxes see a session's workspace (Config.WorkDir,
// with its default).
func (m *Manager) WorkDir() string { return m.cfg.WorkDir }

// WorkDir is where the sandboxes see the session's workspace.
func (s *Session) WorkDir() string { return s.m.cfg.WorkDir }

// Options configure one session. The zero value is usable.
type Options struct {
	// Owner is who may use the session, compared whole (kind and
	// name); every other caller is told it does not exist. Required: a
	// session of nobody is refused.
	Owner caller.ID
	// TTL is the idle time after which the session expires; zero means
	// Config.TTL. It may not exceed Config.MaxLifetime.
	TTL time.Duration
	// Env holds KEY=VALUE pairs every call of the session gets.
	Env []string
	// Cwd is where calls start until a shell call changes directory;
	// empty means the working directory (Config.WorkDir), which it must
	// be or be below.
	Cwd string
	// Limits are the resources of each of the session's sandboxes (a
	// call may set its own); zero fields mean jail's defaults.
	Limits box.Limits
	// WorkspaceBytes is the size of the workspace; zero means
	// Config.WorkspaceBytes.
	WorkspaceBytes int64
	// Egress, if not nil, gives the session a way out: its workspace is
	// made with a proxy listener, every call and job finds the proxy
	// variables in its environment, and Egress(id) is served on the
	// listener until the session is removed. nil: loopback only.
	Egress func(sessionID string) Egress
	// Attached makes the session the workspace of one connection of its
	// owner's (an MCP session) rather than one the owner keeps by id. It
	// counts against Config.MaxAttachedPerOwner instead of MaxPerOwner,
	// and it may be evicted: when a Create of its owner finds the
	// owner's attached quota or the daemon's full, the owner's attached
	// session idle the longest (nothing running, not held: Session.Hold)
	// is removed to make room, with ErrEvicted as its Err. Its front end
	// holds it while the connection is there, so that TTL counts from
	// when the connection went.
	Attached bool
}

// place is what a reservation counts against: its owner's quota of its
// kind.
type place struct {
	owner    caller.ID
	attached bool
}

// Session is one workspace and what carries over between its calls.
type Session struct {
	m        *Manager
	id       string
	owner    caller.ID
	ws       Workspace
	proxy    *proxyServer // nil without egress
	limits   box.Limits
	ttl      time.Duration
	attached bool
	created  time.Time
	deadline time.Time // created + MaxLifetime

	ctx    context.Context // ends when the session is removed
	cancel context.CancelFunc
	wg     sync.WaitGroup // calls and jobs in flight
	done   chan struct{}  // closed once removed

	mu       sync.Mutex
	env      map[string]string
	cwd      string
	lastUsed time.Time
	active   int
	// holds count the Holds not yet released: a held session does not
	// expire while idle, and is not evicted.
	holds   int
	closing bool
	// removed is why the session left the Manager (Err); nil while it
	// is in it.
	removed  *RemovedError
	jobs     map[string]*Job
	jobOrder []string
}

// Info describes a session.
type Info struct {
	ID      string
	Owner   caller.ID
	Created time.Time
	// ExpiresAt is when the session expires if nothing runs in it from
	// now on (while a call or job runs, the end of its maximum lifetime).
	ExpiresAt time.Time
	TTL       time.Duration
	// WorkDir is where the sandboxes see the workspace (Config.WorkDir);
	// Cwd is WorkDir or below it.
	WorkDir        string
	Cwd            string
	Env            []string // sorted KEY=VALUE
	Limits         box.Limits
	WorkspaceBytes int64 // the quota
	WorkspaceUsed  int64
	// Attached: the session is a connection's (Options.Attached).
	Attached    bool
	Jobs        int
	RunningJobs int
	// Egress is what the session's proxy counted so far; nil if the
	// session has no egress.
	Egress *box.EgressUsage
}

// Create makes a session: its workspace, network namespace and uid range.
func (m *Manager) Create(ctx context.Context, opts Options) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = m.cfg.TTL
	}
	if opts.WorkspaceBytes == 0 {
		opts.WorkspaceBytes = m.cfg.WorkspaceBytes
	}
	cwd, err := checkOptions(&opts, m.cfg)
	if err != nil {
		return nil, err
	}
	env, err := parseEnv(opts.Env)
	if err != nil {
		return nil, err
	}
	at := place{opts.Owner, opts.Attached}
	evicted, err := m.reserve(at)
	if err != nil {
		return nil, err
	}
	if evicted != nil {
		// Its place is this session's already; its memory goes before
		// the new workspace takes some.
		m.log.Info("session evicted", "id", evicted.id, "owner", evicted.owner.String(), "reason", evicted.Err())
		if err := evicted.remove(); err != nil {
			m.log.Warn("removing evicted session", "id", evicted.id, "err", err)
		}
	}
	var prestart *box.Limits
	if !m.cfg.NoPrestart {
		prestart = &opts.Limits
	}
	ws, err := m.jail.NewWorkspace(ctx, opts.WorkspaceBytes, opts.Egress != nil, prestart)
	if err != nil {
		m.unreserve(at, nil)
		return nil, fmt.Errorf("create session: %w", err)
	}
	id := uuid.NewString()
	if m.cfg.NewID != nil {
		id = m.cfg.NewID()
	}
	var proxy *proxyServer
	if opts.Egress != nil {
		ln := ws.TakeProxyListener()
		if ln == nil {
			m.unreserve(at, nil)
			return nil, errors.Join(errors.New("create session: the workspace has no proxy listener"), ws.Close())
		}
		proxy = serveProxy(opts.Egress(id), ln)
	}
	now := time.Now()
	s := &Session{
		m: m, id: id, owner: opts.Owner, ws: ws, proxy: proxy,
		limits: opts.Limits, ttl: opts.TTL, attached: opts.Attached, created: now, deadline: now.Add(m.cfg.MaxLifetime),
		done: make(chan struct{}), env: env, cwd: cwd, lastUsed: now, jobs: make(map[string]*Job),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !m.unreserve(at, s) {
		// Closed meanwhile.
		s.cancel()
		proxy.stop()
		_ = ws.Close()
		return nil, ErrClosed
	}
	return s, nil
}

func checkOptions(o *Options, cfg Config) (string, error) {
	switch {
	case o.Owner.IsZero():
		return "", invalid("owner", "a session must have an owner")
	case o.TTL < 0 || o.TTL > cfg.MaxLifetime:
		return "", invalid("ttl_seconds", "%v: must be between 0 and the maximum lifetime %v", o.TTL, cfg.MaxLifetime)
	case o.WorkspaceBytes < 0 || o.WorkspaceBytes > cfg.MaxWorkspaceBytes:
		return "", invalid("workspace_bytes", "%d: must be between 0 and %d", o.WorkspaceBytes, cfg.MaxWorkspaceBytes)
	}
	if err := o.Limits.Validate(); err != nil {
		return "", err
	}
	cwd := cfg.WorkDir
	if o.Cwd != "" {
		if !path.IsAbs(o.Cwd) || !inWork(path.Clean(o.Cwd), cwd) || strings.IndexByte(o.Cwd, 0) >= 0 {
			return "", invalid("cwd", "%q: must be %s or below it", o.Cwd, cwd)
		}
		cwd = path.Clean(o.Cwd)
	}
	return cwd, nil
}

// reserve takes a place for a session at p, or says which limit is
// reached and what p's owner holds. If a limit is reached and the owner has
// an attached session idle, and removing it frees the place, that session
// is taken out of the Manager (evicted) and returned for the caller to
// remove.
func (m *Manager) reserve(p place) (evicted *Session, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.drainIdle > 0 {
		return nil, ErrDraining
	}
	now := time.Now()
	total := len(m.sessions)
	for _, n := range m.pending {
		total += n
	}
	h := holding{kept: m.pending[place{p.owner, false}], attached: m.pending[place{p.owner, true}]}
	var idlest [2]*Session // the owner's kept and attached sessions idle the longest
	var idlestFor [2]time.Duration
	for _, s := range m.sessions {
		if s.owner != p.owner {
			continue
		}
		k := 0
		if s.attached {
			h.attached++
			k = 1
		} else {
			h.kept++
		}
		if d, ok := s.evictable(now); ok && (idlest[k] == nil || d > idlestFor[k]) {
			idlest[k], idlestFor[k] = s, d
		}
	}
	var limit *LimitError
	switch {
	case !p.attached && h.kept >= m.cfg.MaxPerOwner:
		limit = &LimitError{What: "sessions per owner", Max: m.cfg.MaxPerOwner}
	case p.attached && h.attached >= m.cfg.MaxAttachedPerOwner:
		limit = &LimitError{What: "attached sessions per owner", Max: m.cfg.MaxAttachedPerOwner}
	case total >= m.cfg.MaxSessions:
		limit = &LimitError{What: "sessions", Max: m.cfg.MaxSessions}
	}
	if limit != nil {
		// Only an attached session is evicted, and only when that frees
		// every limit the place counts against: the daemon's, and its
		// owner's attached quota. A kept session is its owner's to
		// delete, and its quota has no attached session in it.
		if v := idlest[1]; v != nil && limit.What != "sessions per owner" {
			delete(m.sessions, v.id)
			v.setRemoved(ErrEvicted, fmt.Sprintf("it was idle for %v and made room for a new session of its owner's (%s: at most %d)",
				idlestFor[1].Round(time.Second), limit.What, limit.Max))
			m.pending[p]++
			return v, nil
		}
		limit.Owner, limit.Kept, limit.Attached = p.owner, h.kept, h.attached
		for k, s := range idlest {
			// The kind that counts against the limit: the place's,
			// or either for the daemon's.
			if s == nil || (limit.What != "sessions" && (k == 1) != p.attached) || idlestFor[k] <= limit.Idle {
				continue
			}
			limit.Idle, limit.TTL = idlestFor[k], s.ttl
		}
		return nil, limit
	}
	m.pending[p]++
	return nil, nil
}

// holding counts an owner's sessions of each kind.
type holding struct{ kept, attached int }

// evictable reports how long s has been idle (nothing running, not held),
// and whether it is.
func (s *Session) evictable(now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active > 0 || s.holds > 0 {
		return 0, false
	}
	return now.Sub(s.lastUsed), true
}

// unreserve gives a reserved place back and, if s is not nil, gives it to
// s. It reports false if the Manager was closed meanwhile.
func (m *Manager) unreserve(p place, s *Session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending[p]--; m.pending[p] == 0 {
		delete(m.pending, p)
	}
	if s == nil || m.closed {
		return false
	}
	m.sessions[s.id] = s
	return true
}

// Get returns owner's session id; another owner's is ErrNotFound, and so
// is a session whose workspace was lost (it is removed then, and the error
// says so).
func (m *Manager) Get(owner caller.ID, id string) (*Session, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok || s.owner != owner || owner.IsZero() {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: session %q", ErrNotFound, id)
	}
	if !s.lost() {
		m.mu.Unlock()
		return s, nil
	}
	delete(m.sessions, id)
	s.setRemoved(ErrNotFound, lostReason)
	m.mu.Unlock()
	m.dropLost(s)
	return nil, fmt.Errorf("%w: session %q was lost: the jaild worker that held its workspace exited", ErrNotFound, id)
}

const lostReason = "its workspace was lost with the jaild worker that held it"

// lost reports whether s's workspace went from under it.
func (s *Session) lost() bool {
	select {
	case <-s.ws.Lost():
		return true
	default:
		return false
	}
}

// dropLost removes a lost session, which the caller took out of the map.
func (m *Manager) dropLost(s *Session) {
	m.log.Warn("session lost with its workspace", "id", s.id, "owner", s.owner.String())
	if err := s.remove(); err != nil {
		m.log.Warn("removing lost session", "id", s.id, "err", err)
	}
}

// List describes owner's sessions, oldest first.
func (m *Manager) List(owner caller.ID) []Info {
	m.mu.Lock()
	var mine []*Session
	for _, s := range m.sessions {
		if s.owner == owner && !s.lost() {
			mine = append(mine, s)
		}
	}
	m.mu.Unlock()
	sort.Slice(mine, func(i, j int) bool { return mine[i].created.Before(mine[j].created) })
	out := make([]Info, 0, len(mine))
	for _, s := range mine {
		out = append(out, s.Info())
	}
	return out
}

// Delete removes owner's session id: it kills its calls and jobs, waits for
// their sandboxes to go, then removes its workspace and network namespace.
func (m *Manager) Delete(owner caller.ID, id string) error {
	s, err := m.Get(owner, id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.sessions[id] != s {
		m.mu.Unlock()
		return fmt.Errorf("%w: session %q", ErrNotFound, id) // removed meanwhile
	}
	delete(m.sessions, id)
	s.setRemoved(ErrNotFound, "it was deleted")
	m.mu.Unlock()
	return s.remove()
}

// remove tears s down; the caller has taken it out of the Manager's map,
// so this runs once.
func (s *Session) remove() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	// The sandboxes are gone: the proxy goes, then the workspace (whose
	// network namespace the listener is in).
	s.proxy.stop()
	err := s.ws.Close()
	// The jobs have ended: their output goes with the session.
	s.mu.Lock()
	for id := range s.jobs {
		s.forgetJob(id)
	}
	s.mu.Unlock()
	close(s.done)
	if err != nil {
		return fmt.Errorf("remove session %s: %w", s.id, err)
	}
	return nil
}

// Close removes every session and stops the expiry goroutine.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for id, s := range m.sessions {
		all = append(all, s)
		delete(m.sessions, id)
		s.setRemoved(ErrClosed, "the daemon is shutting down")
	}
	m.mu.Unlock()
	close(m.stop)
	m.reaper.Wait()
	m.removals.Wait()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.remove() }()
	}
	wg.Wait()
	return joinErrs(errs)
}

// reap removes expired sessions until Close.
func (m *Manager) reap() {
	defer m.reaper.Done()
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.expire(now)
		}
	}
}

// Drain makes the Manager refuse new sessions (ErrDraining) and remove
// every session that has run nothing for idle (no call, no running job),
// so that a daemon that is going away keeps serving the sessions in use
// and lets the others go. Len tells when none is left. Calling it again
// changes idle.
func (m *Manager) Drain(idle time.Duration) {
	if idle <= 0 {
		idle = time.Nanosecond
	}
	m.mu.Lock()
	m.drainIdle = idle
	m.mu.Unlock()
	m.expire(time.Now())
}

// Len is the number of live sessions.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// expire removes the sessions that are expired at now, and while
// draining, the ones idle for the drain's idle time.
func (m *Manager) expire(now time.Time) {
	m.mu.Lock()
	var dead, lost []*Session
	drainIdle := m.drainIdle
	for id, s := range m.sessions {
		switch {
		case s.lost():
			lost = append(lost, s)
			delete(m.sessions, id)
			s.setRemoved(ErrNotFound, lostReason)
		case s.expired(now):
			dead = append(dead, s)
			delete(m.sessions, id)
		case drainIdle > 0 && s.idleFor(now, drainIdle):
			dead = append(dead, s)
			delete(m.sessions, id)
			s.setRemoved(ErrExpired, fmt.Sprintf("it was idle for %v while the daemon drained", drainIdle))
		}
	}
	m.mu.Unlock()
	for _, s := range lost {
		m.dropLost(s)
	}
	// Each removal runs on its own: one whose sandboxes are slow to go
	// must hold up neither the next expiry check nor the other sessions.
	for _, s := range dead {
		m.log.Info("session expired", "id", s.id, "owner", s.owner.String())
		m.removals.Add(1)
		go func() {
			defer m.removals.Done()
			if err := s.remove(); err != nil {
				m.log.Warn("removing expired session", "id", s.id, "err", err)
			}
		}()
	}
}

// expired reports whether s is expired at now, and if so records why.
func (s *Session) expired(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !now.Before(s.deadline):
		s.removed = &RemovedError{Err: ErrExpired, Reason: fmt.Sprintf("it expired at its maximum lifetime, %v", s.m.cfg.MaxLifetime)}
	case s.active == 0 && s.holds == 0 && !now.Before(s.lastUsed.Add(s.ttl)):
		s.removed = &RemovedError{Err: ErrExpired, Reason: fmt.Sprintf("it expired after %v idle", s.ttl)}
	default:
		return false
	}
	return true
}

// setRemoved records why s left the Manager, which the caller holds.
func (s *Session) setRemoved(err error, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = &RemovedError{Err: err, Reason: reason}
}

// Err is nil while the session is its Manager's; once it was taken out to
// be removed (expired, evicted, deleted, lost, or the Manager closed), a
// *RemovedError that says why.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed == nil {
		return nil
	}
	return s.removed
}

// Hold keeps s from expiring while idle until release is called, and from
// being evicted: a front end holds the session of a connection
// (Options.Attached) while its client is connected, so that the TTL counts
// from when the client went. MaxLifetime, Delete and Drain apply as ever.
// release may be called more than once.
func (s *Session) Hold() (release func()) {
	s.mu.Lock()
	s.holds++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.holds--
			s.lastUsed = time.Now()
			s.mu.Unlock()
		})
	}
}

// idleFor reports whether nothing has run in s for d: no call in
// progress, no running job, and the last call ended d ago.
func (s *Session) idleFor(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active > 0 || now.Before(s.lastUsed.Add(d)) {
		return false
	}
	for _, j := range s.jobs {
		if !j.isEnded() {
			return false
		}
	}
	return true
}

// Stats counts the sessions and their running jobs, for metrics.
func (m *Manager) Stats() (sessions, runningJobs int) {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		for _, j := range s.jobs {
			if !j.isEnded() {
				runningJobs++
			}
		}
		s.mu.Unlock()
	}
	return len(all), runningJobs
}

// MaxJobTimeout is the longest a background job may run (Config.MaxJobTimeout).
func (m *Manager) MaxJobTimeout() time.Duration { return m.cfg.MaxJobTimeout }

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Done is closed once the session has been removed (deleted or expired).
func (s *Session) Done() <-chan struct{} { return s.done }

// Limits are the resources of each of the session's sandboxes unless a
// call sets its own; fixed when the session is created.
func (s *Session) Limits() box.Limits { return s.limits }

// Info describes the session now.
func (s *Session) Info() Info {
	used, _ := s.ws.Used()
	s.mu.Lock()
	defer s.mu.Unlock()
	in := Info{
		ID: s.id, Owner: s.owner, Created: s.created, TTL: s.ttl, WorkDir: s.m.cfg.WorkDir, Cwd: s.cwd, Env: envList(s.env),
		Limits: s.limits, WorkspaceBytes: s.ws.Size(), WorkspaceUsed: used, Jobs: len(s.jobs),
		Egress: s.proxy.usage(), Attached: s.attached,
	}
	for _, j := range s.jobs {
		if !j.isEnded() {
			in.RunningJobs++
		}
	}
	in.ExpiresAt = s.deadline
	if s.active == 0 && s.holds == 0 {
		if idle := s.lastUsed.Add(s.ttl); idle.Before(in.ExpiresAt) {
			in.ExpiresAt = idle
		}
	}
	return in
}

// SetEnv sets the KEY=VALUE pairs in the session's environment, and
// removes the variables named in unset, for every later call.
func (s *Session) SetEnv(set []string, unset []string) error {
	add, err := parseEnv(set)
	if err != nil {
		return err
	}
	for _, k := range unset {
		if err := CheckEnvName(k); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range unset {
		delete(s.env, k)
	}
	for k, v := range add {
		s.env[k] = v
	}
	s.lastUsed = time.Now()
	return nil
}

// begin registers a call or job; end undoes it. A session being removed
// takes none.
func (s *Session) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return fmt.Errorf("%w: session %s is being removed", ErrClosed, s.id)
	}
	s.active++
	s.wg.Add(1)
	return nil
}

func (s *Session) end() {
	s.mu.Lock()
	s.active--
	s.lastUsed = time.Now()
	s.mu.Unlock()
	s.wg.Done()
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func invalid(field, format string, args ...any) error {
	return &box.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func joinErrs(errs []error) error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return fmt.Errorf("%w", out[0]) // the first; the rest were logged by remove's callers
}
