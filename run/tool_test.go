package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

// TestToolTimeouts: an agent tool call's default and maximum timeout come
// from the maxima, the default lowered to the maximum.
func TestToolTimeouts(t *testing.T) {
	for _, tt := range []struct {
		max      run.Maxima
		def, top time.Duration
	}{
		{run.Maxima{}, 120 * time.Second, 600 * time.Second},
		{run.Maxima{Timeout: time.Hour}, 120 * time.Second, 600 * time.Second},
		{run.Maxima{Timeout: 30 * time.Second}, 30 * time.Second, 30 * time.Second},
		{run.Maxima{ToolTimeout: 5 * time.Second}, 5 * time.Second, 600 * time.Second},
		{run.Maxima{ToolTimeout: time.Hour, Timeout: time.Minute}, time.Minute, time.Minute},
	} {
		if def, top := tt.max.ToolTimeouts(); def != tt.def || top != tt.top {
			t.Errorf("%+v: %v, %v; want %v, %v", tt.max, def, top, tt.def, tt.top)
		}
	}
}

// TestToolCallTimeout: the chain gives an agent tool's call its default,
// reduces one above the maximum to it (a value no Duration holds too),
// refuses a negative one naming the caller's field; Maxima.ToolCallTimeout
// says what it gave, and leaves the request alone.
func TestToolCallTimeout(t *testing.T) {
	var got time.Duration
	base := baseFunc(func(_ context.Context, s *jail.Spec) (*box.Result, error) { got = s.Timeout; return &box.Result{}, nil })
	r, err := run.Chain(base, run.ChainOptions{Max: run.Maxima{Timeout: 300 * time.Second, ToolTimeout: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ms   int64
		want time.Duration
		err  string
	}{
		{0, 20 * time.Second, ""},
		{1500, 1500 * time.Millisecond, ""},
		{300000, 300 * time.Second, ""},
		{300001, 300 * time.Second, ""},
		{1e15, 300 * time.Second, ""},
		{-1, 0, "invalid timeout: -1: must not be negative (0 means the default)"},
	} {
		got = 0
		req := &run.Request{Spec: &jail.Spec{Command: box.Command{Args: []string{"true"}}}, Tool: true}
		req.SetTimeout("timeout", tt.ms, time.Millisecond)
		asked := req.Spec.Timeout
		_, err := r.Run(context.Background(), *req)
		said := run.Maxima{Timeout: 300 * time.Second, ToolTimeout: 20 * time.Second}.ToolCallTimeout(asked, 0)
		switch {
		case tt.err != "":
			if err == nil || err.Error() != tt.err {
				t.Errorf("%d ms: err %v, want %q", tt.ms, err, tt.err)
			}
		case err != nil || got != tt.want || said != tt.want || req.Spec.Timeout != asked:
			t.Errorf("%d ms: err %v, ran with %v, said %v, request's spec now %v; want %v", tt.ms, err, got, said, req.Spec.Timeout, tt.want)
		}
	}
}

// TestDefaultLimits: a request that leaves its limits unset gets
// Maxima.DefaultLimits, lowered to the maxima, and the jail's defaults
// where those are unset too.
func TestDefaultLimits(t *testing.T) {
	m := run.Maxima{Limits: box.Limits{Memory: 1 << 30, Pids: 50}, DefaultLimits: box.Limits{Memory: 512 << 20, Pids: 100}}
	l, _, _ := m.Defaults()
	if want := (box.Limits{Memory: 512 << 20, Pids: 50, CPUs: box.DefaultCPUs, TmpfsSize: box.DefaultTmpfsSize}); l != want {
		t.Errorf("defaults %+v, want %+v", l, want)
	}
}

// TestToolCallTimeoutOfAJob: a background job of an agent tool that asks
// for no timeout runs up to the sessions' job timeout; one that asks for
// more than the lower of it and the tools' maximum gets that.
func TestToolCallTimeoutOfAJob(t *testing.T) {
	m := run.Maxima{ToolTimeout: 20 * time.Second}
	for _, tt := range []struct{ asked, job, want time.Duration }{
		{0, time.Hour, time.Hour},
		{30 * time.Second, time.Hour, 30 * time.Second},
		{2 * time.Hour, time.Hour, run.MaxToolTimeout},
		{0, 5 * time.Minute, 5 * time.Minute},
		{9 * time.Minute, 5 * time.Minute, 5 * time.Minute},
		{0, 0, 20 * time.Second},
		{time.Hour, 0, run.MaxToolTimeout},
	} {
		if got := m.ToolCallTimeout(tt.asked, tt.job); got != tt.want {
			t.Errorf("asked %v, job timeout %v: %v, want %v", tt.asked, tt.job, got, tt.want)
		}
	}
}
