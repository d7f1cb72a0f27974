package jail

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
)

// TestStartErrorPidsBudget: a start refused for want of a process (EAGAIN,
// as libcontainer's nsexec and Go's runtime report it) is box.ErrPidsBudget,
// with a message that names no host pid; other failures are not.
func TestStartErrorPidsBudget(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("unable to start container process: can't get final child's PID from pipe: EOF; runc init error(s): nsexec-0[30150]: unable to spawn stage-1: Resource temporarily unavailable"), true},
		{errors.New("runtime: failed to create new OS thread (have 2 already; errno=11)"), true},
		{fmt.Errorf("fork/exec /proc/self/exe: %w", unix.EAGAIN), true},
		{errors.New("runc init: dial: errno=110"), false},
		{errors.New("exec: \"nope\": executable file not found in $PATH"), false},
		{errors.New("unable to apply cgroup configuration: permission denied"), false},
	}
	for _, tt := range tests {
		err := startError("cmd", tt.err)
		if got := errors.Is(err, box.ErrPidsBudget); got != tt.want {
			t.Errorf("startError(%q) = %v: pids budget %v, want %v", tt.err, err, got, tt.want)
		}
		if tt.want && err.Error() != box.ErrPidsBudget.Error() {
			t.Errorf("startError(%q) says %q, want box.ErrPidsBudget's message alone", tt.err, err)
		}
	}
}
