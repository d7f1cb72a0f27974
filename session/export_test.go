package session

// Prestarted reports whether a sandbox waits for s's next call now (a
// workspace of this process made with jail.WithPrestart).
func Prestarted(s *Session) bool {
	w, ok := s.ws.(interface{ Prestarted() bool })
	return ok && w.Prestarted()
}
