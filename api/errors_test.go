package api_test

import (
	"errors"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
)

// TestErrorClassOutcomes: session errors are 404 and 409, and keep their
// message and identity; a command not found is 422 command_not_found, which
// a client reads as exit 127, and not_found is a usage error.
func TestErrorClassOutcomes(t *testing.T) {
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
		{box.ErrCommandNotFound, 422, api.CodeCommandNotFound},
	} {
		if o := api.ErrorOutcome(tt.err); o.Status != tt.status || o.Code != tt.code {
			t.Errorf("%v: %+v, want %d %s", tt.err, o, tt.status, tt.code)
		}
	}
	if o := api.CodeOutcome(api.CodeCommandNotFound); o.Exit != api.ExitNotFound {
		t.Errorf("CodeOutcome(command_not_found).Exit = %d, want %d", o.Exit, api.ExitNotFound)
	}
	if o := api.CodeOutcome(api.CodeNotFound); o.Exit != api.ExitUsage || o.Status != 404 {
		t.Errorf("CodeOutcome(not_found) = %+v, want 404 and exit %d", o, api.ExitUsage)
	}
	if box.Mark(nil, box.ErrLimit) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
