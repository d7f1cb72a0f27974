package run_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// TestWorkDirCwd: the chain refuses a cwd outside the sandboxes' working
// directory and /tmp before anything runs, for the default working
// directory and for another.
func TestWorkDirCwd(t *testing.T) {
	for _, tc := range []struct {
		workDir, cwd string
		ok           bool
	}{
		{"", "", true},
		{"", "/work/src", true},
		{"", "/etc", false},
		{"", "/workspace", false},
		{"/workspace", "", true},
		{"/workspace", "/workspace/src", true},
		{"/workspace", "/tmp", true},
		{"/workspace", "/work", false},
		{"/workspace", "/work/src", false},
	} {
		ran := false
		base := baseFunc(func(context.Context, *jail.Spec) (*box.Result, error) { ran = true; return &box.Result{}, nil })
		r, err := run.Chain(base, run.ChainOptions{WorkDir: tc.workDir})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Run(context.Background(), run.Request{Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}, Dir: tc.cwd}}})
		var ie *box.InvalidError
		switch {
		case tc.ok && (err != nil || !ran):
			t.Errorf("workdir %q cwd %q: %v (ran %v), want it run", tc.workDir, tc.cwd, err, ran)
		case !tc.ok && (!errors.As(err, &ie) || ie.Field != "cwd" || ran):
			t.Errorf("workdir %q cwd %q: %v (ran %v), want invalid cwd", tc.workDir, tc.cwd, err, ran)
		}
	}
}
