package box_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
)

// TestInvalidFields: every refusal is an *InvalidError naming the field as
// the wire does, so that no layer translates names.
func TestInvalidFields(t *testing.T) {
	args := []string{"true"}
	for _, tt := range []struct {
		name  string
		err   error
		field string // "" means valid
	}{
		{"zero limits", box.Limits{}.Validate(), ""},
		{"defaults", box.Limits{}.WithDefaults().Validate(), ""},
		{"memory too small", box.Limits{Memory: 1 << 20}.Validate(), "memory_bytes"},
		{"negative pids", box.Limits{Pids: -1}.Validate(), "pids"},
		{"NaN cpus", box.Limits{CPUs: math.NaN()}.Validate(), "cpus"},
		{"tmpfs too small", box.Limits{TmpfsSize: 100}.Validate(), "tmpfs_size_bytes"},
		{"memory above max", box.Limits{Memory: 2 << 30}.Within(box.Limits{Memory: 1 << 30}), "memory_bytes"},
		{"default memory above max", box.Limits{}.Within(box.Limits{Memory: 1 << 20}), "memory_bytes"},
		{"tmpfs above max", box.Limits{TmpfsSize: 2 << 20}.Within(box.Limits{TmpfsSize: 1 << 20}), "tmpfs_size_bytes"},
		{"no max", box.Limits{Memory: 1 << 40}.Within(box.Limits{}), ""},
		{"command", (&box.Command{Args: args}).Validate(), ""},
		{"no command", (&box.Command{}).Validate(), "command"},
		{"bad env", (&box.Command{Args: args, Env: []string{"NOEQUALS"}}).Validate(), "env"},
		{"relative cwd", (&box.Command{Args: args, Dir: "work"}).Validate(), "cwd"},
		{"timeout above max", (&box.Command{Args: args, Timeout: box.MaxTimeout + time.Second}).Validate(), "timeout_ms"},
		{"negative output", (&box.Command{Args: args, MaxOutput: -1}).Validate(), "max_output_bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ie *box.InvalidError
			switch {
			case tt.field == "" && tt.err != nil:
				t.Fatalf("err = %v, want nil", tt.err)
			case tt.field != "" && (!errors.As(tt.err, &ie) || ie.Field != tt.field):
				t.Fatalf("err = %#v, want an *InvalidError of field %s", tt.err, tt.field)
			case tt.field != "" && !box.IsInvalid(fmt.Errorf("wrapped: %w", tt.err)):
				t.Fatal("IsInvalid does not see through wrapping")
			}
		})
	}
}

// TestClasses: a marked or typed error keeps its own identity and message
// and gains its class.
func TestClasses(t *testing.T) {
	own := errors.New("session: not found")
	err := fmt.Errorf("get: %w", box.Mark(own, box.ErrNotFound))
	if !errors.Is(err, own) || !errors.Is(err, box.ErrNotFound) || err.Error() != "get: session: not found" {
		t.Errorf("Mark: %v", err)
	}
	if box.Mark(nil, box.ErrLimit) != nil {
		t.Error("Mark(nil) is not nil")
	}
	if busy := error(&box.BusyError{RetryAfter: time.Second}); !errors.Is(busy, box.ErrBusy) || errors.Is(busy, box.ErrUnavailable) {
		t.Errorf("BusyError classes wrong")
	}
	classes := []error{box.ErrCommandNotFound, box.ErrNotExecutable, box.ErrNotFound, box.ErrSessionLost, box.ErrLimit,
		box.ErrBusy, box.ErrUnavailable, box.ErrClosed, box.ErrNotRoot, box.ErrUnsupported, box.ErrRootfs, box.ErrUntrusted}
	for i, a := range classes {
		for j, b := range classes {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, i != j)
			}
		}
	}
}

func TestCheckDir(t *testing.T) {
	for _, tc := range []struct {
		name, dir, workDir string
		ok                 bool
	}{
		{name: "empty", dir: "", workDir: "/workspace", ok: true},
		{name: "the workdir", dir: "/workspace", workDir: "/workspace", ok: true},
		{name: "below it", dir: "/workspace/a/../b", workDir: "/workspace", ok: true},
		{name: "tmp", dir: "/tmp/x", workDir: "/workspace", ok: true},
		{name: "the default's dir under another", dir: "/work", workDir: "/workspace"},
		{name: "a sibling sharing the prefix", dir: "/workspace2", workDir: "/workspace"},
		{name: "default workdir", dir: "/work/x", workDir: "", ok: true},
		{name: "outside", dir: "/etc", workDir: ""},
		{name: "relative", dir: "work", workDir: ""},
		{name: "escapes", dir: "/workspace/../etc", workDir: "/workspace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := box.CheckDir(tc.dir, tc.workDir)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckDir(%q, %q) = %v, want ok %v", tc.dir, tc.workDir, err, tc.ok)
			}
			var ie *box.InvalidError
			if err != nil && (!errors.As(err, &ie) || ie.Field != "cwd") {
				t.Fatalf("CheckDir(%q, %q) = %#v, want an *InvalidError of field cwd", tc.dir, tc.workDir, err)
			}
			if err != nil && tc.workDir != "" && !strings.Contains(err.Error(), tc.workDir) {
				t.Errorf("%v does not name the working directory %s", err, tc.workDir)
			}
		})
	}
}

func ExampleElide() {
	fmt.Printf("%q\n", box.Elide(1234))
	// Output: "\n[... jaild: 1234 bytes of output elided ...]\n"
}

// TestLimitsOr: Or fills only the zero fields, and WithDefaults is Or of
// the defaults.
func TestLimitsOr(t *testing.T) {
	def := box.Limits{Memory: 1, Pids: 2, CPUs: 3, TmpfsSize: 4}
	if got, want := (box.Limits{Pids: 20, CPUs: 0.5}).Or(def), (box.Limits{Memory: 1, Pids: 20, CPUs: 0.5, TmpfsSize: 4}); got != want {
		t.Errorf("Or: %+v, want %+v", got, want)
	}
	want := box.Limits{Memory: box.DefaultMemory, Pids: box.DefaultPids, CPUs: box.DefaultCPUs, TmpfsSize: box.DefaultTmpfsSize}
	if got := (box.Limits{}).WithDefaults(); got != want {
		t.Errorf("WithDefaults: %+v, want %+v", got, want)
	}
}
