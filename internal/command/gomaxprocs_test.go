package command

import (
	"slices"
	"testing"
)

// TestBuilderEnv: a sandbox builder's environment gets GOMAXPROCS=1 unless
// it has a GOMAXPROCS of its own, which is kept as it is; the rest of the
// environment passes unchanged, and the caller's slice is not written, not even past its length.
func TestBuilderEnv(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string
		want      []string
		wantAdded bool
	}{
		{"empty", nil, []string{"GOMAXPROCS=1"}, true},
		{"unset", []string{"PATH=/bin", "A=1"}, []string{"PATH=/bin", "A=1", "GOMAXPROCS=1"}, true},
		{"operator's", []string{"GOMAXPROCS=8", "PATH=/bin"}, []string{"GOMAXPROCS=8", "PATH=/bin"}, false},
		{"operator's empty", []string{"GOMAXPROCS="}, []string{"GOMAXPROCS="}, false},
		{"a longer name", []string{"GOMAXPROCSX=2"}, []string{"GOMAXPROCSX=2", "GOMAXPROCS=1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Grow(slices.Clone(tc.env), 4) // room an append could write into
			before := slices.Clone(in[:cap(in)])
			got, added := BuilderEnv(in)
			if !slices.Equal(got, tc.want) || added != tc.wantAdded {
				t.Errorf("BuilderEnv(%q) = %q, %v; want %q, %v", tc.env, got, added, tc.want, tc.wantAdded)
			}
			if !slices.Equal(in[:cap(in)], before) {
				t.Errorf("BuilderEnv changed its argument: %q", in)
			}
		})
	}
}
