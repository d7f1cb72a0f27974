package run

import "context"

type callerKey struct{}

// WithCaller returns ctx carrying the caller's identity: a token's name, or
// the peer when the daemon runs without tokens.
func WithCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerKey{}, name)
}

// CallerFromContext returns the identity WithCaller stored, or "".
func CallerFromContext(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the id of the HTTP request it serves.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFromContext returns the id WithRequestID stored, or "".
func RequestIDFromContext(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}
