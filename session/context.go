package session

import "context"

type ctxKey struct{}

// NewContext returns ctx carrying s: a front end hands a request's session
// to a handler of another package (the files API) this way.
func NewContext(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// FromContext returns the session NewContext put in ctx.
func FromContext(ctx context.Context) (*Session, bool) {
	s, ok := ctx.Value(ctxKey{}).(*Session)
	return s, ok
}
