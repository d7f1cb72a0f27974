package run

import "testing"

// TestShellOf: a session call keeps the shell of the request's shell-mode
// argv; any other argv leaves the session's default.
func TestShellOf(t *testing.T) {
	tests := []struct {
		args    []string
		command string
		want    string
	}{
		{[]string{"/bin/sh", "-c", "echo hi"}, "echo hi", "/bin/sh"},
		{[]string{"/bin/bash", "-c", "echo hi"}, "echo hi", "/bin/bash"},
		{[]string{"/bin/zsh", "-c", "echo hi"}, "echo other", ""},
		{[]string{"/bin/bash", "-lc", "echo hi"}, "echo hi", ""},
		{[]string{"echo", "hi"}, "echo hi", ""},
	}
	for _, tt := range tests {
		t.Run(tt.want+" "+tt.command, func(t *testing.T) {
			if got := shellOf(tt.args, tt.command); got != tt.want {
				t.Errorf("shellOf(%q, %q) = %q, want %q", tt.args, tt.command, got, tt.want)
			}
		})
	}
}
