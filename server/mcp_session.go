package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// Each MCP session (a Streamable HTTP session, or the life of a jaild mcp
// stdio process) gets a jaild session of its own, made at its first tool
// call, so that /work, the working directory, exported variables and
// background tasks carry across its calls. The jaild session belongs to the
// caller of that first call, and is attached (session.Options.Attached): it
// counts against the caller's quota of MCP workspaces, not of the sessions
// it keeps over HTTP, and the caller's workspace idle the longest makes room
// for a new one when that quota is full. It is held (session.Session.Hold)
// while its client is there: over stdio for the life of the MCP session,
// over Streamable HTTP while a request of the MCP session is open (a call,
// or the event stream clients keep open while they run). It is removed when
// the MCP session closes (DELETE, the SDK's idle timeout, the end of
// stdin), when nothing held it for MCPOptions.SessionIdle, or when evicted;
// the next call of its MCP session then says, once, that it is gone, and
// the call after makes a fresh one.

// mcpSessions maps MCP sessions to jaild sessions.
type mcpSessions struct {
	svc  *run.Sessions // makes the jaild sessions
	m    *session.Manager
	idle time.Duration // the jaild sessions' TTL
	log  *slog.Logger
	// egress gives each jaild session egress for its caller.
	egress bool
	// tracked: the requests of each MCP session are counted (connected),
	// and hold its jaild session; otherwise (stdio) the MCP session
	// holds it for its whole life.
	tracked bool

	mu sync.Mutex
	by map[*mcp.ServerSession]*mcpSession
	// open counts the requests open, by MCP session id (tracked only).
	open map[string]int
	// watchers wait for their MCP session to close; each ends with it.
	watchers sync.WaitGroup
}

// mcpSession is the jaild session of one MCP session, once made.
type mcpSession struct {
	made  chan struct{} // closed once id or err is set
	id    string
	sess  *session.Session
	owner caller.ID
	err   error
	// release ends the hold on sess; nil while it is not held. Guarded
	// by mcpSessions.mu.
	release func()
}

func newMCPSessions(svc *run.Sessions, idle time.Duration, log *slog.Logger) *mcpSessions {
	return &mcpSessions{svc: svc, m: svc.Manager, idle: idle, log: log, by: map[*mcp.ServerSession]*mcpSession{}, open: map[string]int{}}
}

// get returns the jaild session of ss and its owner, making it (owned by
// who) at the first call. Concurrent first calls share one. If the jaild
// session was removed under the MCP session, the first call to see it gets
// a *goneError and the next makes a new one.
func (s *mcpSessions) get(ctx context.Context, ss *mcp.ServerSession, who caller.ID) (id string, owner caller.ID, err error) {
	owner = ownerOf(who)
	s.mu.Lock()
	e, ok := s.by[ss]
	if !ok {
		e = &mcpSession{made: make(chan struct{}), owner: owner}
		s.by[ss] = e
	}
	s.mu.Unlock()
	if ok && e.owner != owner {
		// The MCP session id is not a credential: the files and tasks of
		// its jaild session are its owner's alone.
		return "", caller.ID{}, box.Mark(errors.New("this MCP session's workspace belongs to another caller"), box.ErrNotFound)
	}
	if ok {
		select {
		case <-e.made:
		case <-ctx.Done():
			return "", caller.ID{}, ctx.Err()
		}
		if e.err != nil {
			return "", caller.ID{}, e.err
		}
		if err := s.gone(ss, e); err != nil {
			if errors.Is(err, errGoneSeen) {
				return s.get(ctx, ss, who) // another call said it
			}
			return "", caller.ID{}, err
		}
		return e.id, e.owner, nil
	}
	sess, err := s.svc.Create(ctx, &run.SessionRequest{
		Caller: who.String(), RequestID: requestIDFromContext(ctx), FrontEnd: "mcp", Owner: e.owner,
		Attached: true, TTL: s.idle, Egress: &api.Egress{Allowed: s.egress},
	})
	if err != nil {
		e.err = mcpLimitError(err, s.idle)
		s.mu.Lock()
		delete(s.by, ss) // the next call tries again
		s.mu.Unlock()
		close(e.made)
		return "", caller.ID{}, e.err
	}
	s.mu.Lock()
	e.id, e.sess = sess.ID(), sess
	if !s.tracked || s.open[ss.ID()] > 0 {
		e.release = sess.Hold()
	}
	s.mu.Unlock()
	close(e.made)
	s.log.Info("mcp session got a jaild session", "mcp_session", ss.ID(), "session", e.id)
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		_ = ss.Wait()
		s.drop(ss, e)
	}()
	return e.id, e.owner, nil
}

// errGoneSeen: the jaild session is gone and another call said so already.
var errGoneSeen = errors.New("the workspace is gone and a call said so")

// gone returns nil while e's jaild session is there. Once it was removed,
// the first call to ask forgets it and gets a *goneError saying why (the
// next call makes a new one); a later call of the same entry gets
// errGoneSeen.
func (s *mcpSessions) gone(ss *mcp.ServerSession, e *mcpSession) error {
	why := e.sess.Err()
	if why == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[ss] != e {
		return errGoneSeen
	}
	delete(s.by, ss)
	if e.release != nil {
		e.release()
		e.release = nil
	}
	return &goneError{why: why}
}

// goneError tells a model that its MCP session's workspace was removed:
// the call that finds out did not run, and the next one starts afresh.
type goneError struct{ why error }

func (e *goneError) Error() string {
	reason := e.why.Error()
	var re *session.RemovedError
	if errors.As(e.why, &re) {
		reason = re.Reason
	}
	return "this MCP session's workspace is gone (" + reason + "): its files in /work, its working directory, " +
		"exported variables and background tasks went with it, and this call ran nothing. " +
		"The next call starts in a fresh, empty /work: recreate what the command needs, then run it again."
}

func (e *goneError) Unwrap() error { return box.Mark(e.why, box.ErrNotFound) }

// lookup returns the jaild session of ss if it has one, and who owns it.
func (s *mcpSessions) lookup(ss *mcp.ServerSession, who caller.ID) (*session.Session, error) {
	s.mu.Lock()
	e, ok := s.by[ss]
	s.mu.Unlock()
	if ok {
		<-e.made
	}
	if !ok || e.err != nil {
		return nil, box.Mark(errors.New("no task: this MCP session has not started any"), box.ErrNotFound)
	}
	if ownerOf(who) != e.owner {
		return nil, box.Mark(errors.New("this MCP session's workspace belongs to another caller"), box.ErrNotFound)
	}
	if err := s.gone(ss, e); err != nil {
		if errors.Is(err, errGoneSeen) {
			return nil, box.Mark(errors.New("no task: this MCP session's workspace is new and has started none"), box.ErrNotFound)
		}
		return nil, err
	}
	sess, err := s.m.Get(e.owner, e.id)
	if err != nil {
		return nil, s.lostUnder(ss, e.id, err)
	}
	return sess, nil
}

// lostUnder turns err, the error of a call that found the jaild session id
// of ss gone (no session), into the one the MCP client gets.
func (s *mcpSessions) lostUnder(ss *mcp.ServerSession, id string, err error) error {
	s.mu.Lock()
	e, ok := s.by[ss]
	s.mu.Unlock()
	if ok && e.id == id && e.sess != nil {
		if gerr := s.gone(ss, e); gerr != nil && !errors.Is(gerr, errGoneSeen) {
			return gerr
		}
	}
	return fmt.Errorf("%w; this session's files, directory and tasks are gone, and the next call starts afresh", err)
}

// connected counts a request of the MCP session mcpID as open until
// disconnected is called; while one is, its jaild session is held.
func (s *mcpSessions) connected(mcpID string) (disconnected func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[mcpID]++; s.open[mcpID] == 1 {
		if e := s.byID(mcpID); e != nil && e.sess != nil && e.release == nil {
			e.release = e.sess.Hold()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[mcpID]--; s.open[mcpID] > 0 {
				return
			}
			delete(s.open, mcpID)
			if e := s.byID(mcpID); e != nil && e.release != nil {
				e.release()
				e.release = nil
			}
		})
	}
}

// byID returns the entry of the MCP session mcpID; s.mu is held.
func (s *mcpSessions) byID(mcpID string) *mcpSession {
	for ss, e := range s.by {
		if ss.ID() == mcpID {
			return e
		}
	}
	return nil
}

// drop removes e, the jaild session of ss, which has closed.
func (s *mcpSessions) drop(ss *mcp.ServerSession, e *mcpSession) {
	s.mu.Lock()
	if s.by[ss] == e {
		delete(s.by, ss)
	}
	s.mu.Unlock()
	if err := s.m.Delete(e.owner, e.id); err != nil && !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrClosed) {
		s.log.Warn("removing the jaild session of a closed mcp session", "session", e.id, "err", err)
		return
	}
	s.log.Info("mcp session closed; its jaild session is removed", "session", e.id)
}

// mcpLimitError words a limit an MCP session's new workspace hit for the
// model and its user: what the caller holds, and how to free a place.
func mcpLimitError(err error, idle time.Duration) error {
	var le *session.LimitError
	if !errors.As(err, &le) || le.Owner.IsZero() {
		return err
	}
	var msg string
	switch le.What {
	case "attached sessions per owner":
		msg = fmt.Sprintf("no workspace for this MCP session: caller %s holds its maximum of %d MCP workspaces, and none is idle "+
			"(each has a call running, a background task, or its client connected)", le.Owner, le.Max)
	case "sessions":
		msg = fmt.Sprintf("no workspace for this MCP session: the daemon holds its maximum of %d sessions; "+
			"caller %s holds %d MCP workspaces, none idle, and %d HTTP sessions", le.Max, le.Owner, le.Attached, le.Kept)
		if le.Idle > 0 {
			msg += fmt.Sprintf(" (the one idle the longest for %v, which expires in %v)", le.Idle.Round(time.Second), max(le.TTL-le.Idle, 0).Round(time.Second))
		}
	default:
		return err
	}
	msg += fmt.Sprintf(". To free one: close MCP sessions you no longer use (their client's DELETE, or end the client); "+
		"a workspace whose client has gone is removed after %v, or as soon as a new one needs its place", idle)
	if le.What == "sessions" {
		msg += "; DELETE /sessions/{id} removes an HTTP session (GET /sessions lists them)"
	}
	return box.Mark(errors.New(msg), box.ErrLimit)
}

// ownerOf is who owns the jaild sessions of who's MCP sessions: who,
// compared whole, or, for a caller the daemon did not authenticate (jaild
// mcp over stdio, whose one client is whoever started it), the local one.
func ownerOf(who caller.ID) caller.ID {
	if who.IsZero() {
		return caller.ID{Kind: caller.Local}
	}
	return who
}

// wait joins the watchers: call it once every MCP session has closed.
func (s *mcpSessions) wait() { s.watchers.Wait() }
