package api_test

import (
	"errors"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
)

// TestSessionOutcomes: session errors are 404 and 409, and keep their
// message and identity; a client reading code not_found still takes it
// for a command not found (exit 127), what jaild run and remote report.
func TestSessionOutcomes(t *testing.T) {
	base := errors.New("session: not found: session \"x\"")
	err := box.Mark(base, box.ErrNotFound)
	if err.Error() != base.Error() || !errors.Is(err, base) || !errors.Is(err, box.ErrNotFound) {
		t.Errorf("Mark: %v", err)
	}
	for _, tt := range []struct {
		err    error
		status int
		code   string
	}{
		{err, 404, api.CodeNotFound},
		{box.Mark(errors.New("too many"), box.ErrLimit), 409, api.CodeLimit},
		{box.ErrCommandNotFound, 422, api.CodeNotFound},
	} {
		if o := api.ErrorOutcome(tt.err); o.Status != tt.status || o.Code != tt.code {
			t.Errorf("%v: %+v, want %d %s", tt.err, o, tt.status, tt.code)
		}
	}
	if o := api.CodeOutcome(api.CodeNotFound); o.Exit != api.ExitNotFound {
		t.Errorf("CodeOutcome(not_found).Exit = %d, want %d", o.Exit, api.ExitNotFound)
	}
	if box.Mark(nil, box.ErrLimit) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
