package session

import "sync"

// What a handler that reads and writes a session's files needs (the files
// API, package session/files): the workspace's directory on the host, the
// owner of the files the session's sandboxes write, and a hold on the
// session while it works there.

// Dir is the host path of the session's workspace. Everything below it was
// written by sandboxed code: resolve paths in it only with openat2 and
// RESOLVE_IN_ROOT (or RESOLVE_BENEATH) on a descriptor of Dir, never with
// ordinary path walks as root.
func (s *Session) Dir() string { return s.ws.Dir() }

// HostIDs are the host uid and gid of the session's sandbox user: a file
// written into Dir on its behalf gets them, or its sandboxes could not
// change it.
func (s *Session) HostIDs() (uid, gid int) { return s.ws.HostIDs() }

// Use holds the session for work done outside its sandboxes (a file
// transfer): until done is called it does not expire for idleness, and
// removing it waits, so that its workspace is not unmounted under an open
// file. Removal never waits on a client, though: it first closes Closing,
// on which the holder must give up promptly (cut its transfer) and call
// done. Its idle time restarts when done is called. A session being
// removed gives ErrClosed.
func (s *Session) Use() (done func(), err error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	return sync.OnceFunc(s.end), nil
}

// Closing is closed when the session's removal begins (Delete, expiry,
// Close): a holder of Use must then stop what it does and call done, since
// the removal waits for it.
func (s *Session) Closing() <-chan struct{} { return s.ctx.Done() }

// Size is the size of the session's workspace (its quota), in bytes.
func (s *Session) Size() int64 { return s.ws.Size() }
