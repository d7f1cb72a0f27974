package run_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// TestSessionRequestsWithoutSessions: a chain without a session manager
// refuses requests that name a session, with the field named, and never
// runs them elsewhere.
func TestSessionRequestsWithoutSessions(t *testing.T) {
	ran := false
	base := baseFunc(func(context.Context, *jail.Spec) (*box.Result, error) { ran = true; return &box.Result{}, nil })
	r, err := run.Chain(base, run.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		id         string
		background bool
		field      string
	}{
		{"session", "x", false, "session_id"},
		{"background", "", true, "session_id"},
		{"background in a session", "x", true, "session_id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := run.Request{SessionID: tt.id, Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}}}}
			var err error
			if tt.background {
				_, err = r.Start(context.Background(), req)
			} else {
				_, err = r.Run(context.Background(), req)
			}
			var ie *box.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.field || ran {
				t.Errorf("err %v (ran %v), want invalid %s", err, ran, tt.field)
			}
		})
	}
}

// TestSessionError: session errors get the api identity front ends answer.
func TestSessionError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want error
	}{
		{session.ErrNotFound, box.ErrNotFound},
		{&session.LimitError{What: "sessions", Max: 1}, box.ErrLimit},
		{session.ErrClosed, box.ErrNotFound},
	} {
		got := run.SessionError(tt.err)
		if !errors.Is(got, tt.want) || !errors.Is(got, tt.err) {
			t.Errorf("SessionError(%v) = %v, want it to be %v too", tt.err, got, tt.want)
		}
	}
	if o := api.ErrorOutcome(run.SessionError(session.ErrNotFound)); o.Status != 404 || o.Code != api.CodeNotFound {
		t.Errorf("not found: %+v", o)
	}
	if o := api.ErrorOutcome(run.SessionError(&session.LimitError{What: "jobs per session", Max: 2})); o.Status != 409 || o.Code != api.CodeLimit {
		t.Errorf("limit: %+v", o)
	}
}

type baseFunc func(context.Context, *jail.Spec) (*box.Result, error)

func (f baseFunc) Run(ctx context.Context, s *jail.Spec) (*box.Result, error) { return f(ctx, s) }
