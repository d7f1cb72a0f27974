package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// Each MCP session (a Streamable HTTP session, or the life of a jaild mcp
// stdio process) gets a jaild session of its own, made at its first tool
// call, so that /work, the working directory, exported variables and
// background tasks carry across its calls. The jaild session belongs to the
// caller of that first call, and is removed when the MCP session closes
// (DELETE, its idle timeout, the end of stdin), or expires by itself.

// mcpSessions maps MCP sessions to jaild sessions.
type mcpSessions struct {
	m   *session.Manager
	log *slog.Logger
	// egress, if not nil, gives each jaild session egress for its
	// caller (MCPOptions.SessionEgress).
	egress func(caller string) (func(sessionID string) session.Egress, error)

	mu sync.Mutex
	by map[*mcp.ServerSession]*mcpSession
	// watchers wait for their MCP session to close; each ends with it.
	watchers sync.WaitGroup
}

// mcpSession is the jaild session of one MCP session, once made.
type mcpSession struct {
	made  chan struct{} // closed once id or err is set
	id    string
	owner caller.ID
	err   error
}

func newMCPSessions(m *session.Manager, log *slog.Logger) *mcpSessions {
	return &mcpSessions{m: m, log: log, by: map[*mcp.ServerSession]*mcpSession{}}
}

// get returns the jaild session of ss and its owner, making it (owned by
// who) at the first call. Concurrent first calls share one.
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
		return "", caller.ID{}, api.Mark(errors.New("this MCP session's workspace belongs to another caller"), api.ErrNoSession)
	}
	if ok {
		select {
		case <-e.made:
		case <-ctx.Done():
			return "", caller.ID{}, ctx.Err()
		}
		return e.id, e.owner, e.err
	}
	opts := session.Options{Owner: e.owner}
	if s.egress != nil {
		opts.Egress, err = s.egress(who.String())
	}
	var sess *session.Session
	if err == nil {
		sess, err = s.m.Create(ctx, opts)
	}
	if err != nil {
		e.err = run.SessionError(err)
		s.mu.Lock()
		delete(s.by, ss) // the next call tries again
		s.mu.Unlock()
		close(e.made)
		return "", caller.ID{}, e.err
	}
	e.id = sess.ID()
	close(e.made)
	s.log.Info("mcp session got a jaild session", "mcp_session", ss.ID(), "session", e.id)
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		_ = ss.Wait()
		s.drop(ss)
	}()
	return e.id, e.owner, nil
}

// lookup returns the jaild session of ss if it has one, and who owns it.
func (s *mcpSessions) lookup(ss *mcp.ServerSession, who caller.ID) (*session.Session, error) {
	s.mu.Lock()
	e, ok := s.by[ss]
	s.mu.Unlock()
	if ok {
		<-e.made
	}
	if !ok || e.err != nil {
		return nil, api.Mark(errors.New("no task: this MCP session has not started any"), api.ErrNoSession)
	}
	if ownerOf(who) != e.owner {
		return nil, api.Mark(errors.New("this MCP session's workspace belongs to another caller"), api.ErrNoSession)
	}
	sess, err := s.m.Get(e.owner, e.id)
	if err != nil {
		s.forget(ss, e.id)
		return nil, run.SessionError(err)
	}
	return sess, nil
}

// forget drops the mapping of ss to the jaild session id (expired or lost),
// so that its next call makes a new one.
func (s *mcpSessions) forget(ss *mcp.ServerSession, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.by[ss]; ok && e.id == id {
		delete(s.by, ss)
	}
}

// drop removes the jaild session of ss, which has closed.
func (s *mcpSessions) drop(ss *mcp.ServerSession) {
	s.mu.Lock()
	e, ok := s.by[ss]
	delete(s.by, ss)
	s.mu.Unlock()
	if !ok || e.err != nil || e.id == "" {
		return
	}
	if err := s.m.Delete(e.owner, e.id); err != nil && !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrClosed) {
		s.log.Warn("removing the jaild session of a closed mcp session", "session", e.id, "err", err)
		return
	}
	s.log.Info("mcp session closed; its jaild session is removed", "session", e.id)
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
