package main

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
)

// TestRemoteBackgroundAndMissingSession: jaild remote --session S
// --background starts a job and prints its id; a session that is not there
// is a usage error with one line, not "command not found".
func TestRemoteBackgroundAndMissingSession(t *testing.T) {
	fakeDaemon(t)
	if out, errOut, code := jaild(t, "session", "new"); code != 0 || out != "s1\n" {
		t.Fatalf("session new: %d %q %q", code, out, errOut)
	}
	out, errOut, code := jaild(t, "remote", "--session", "s1", "--background", "-n", "--", "sleep", "100")
	if code != 0 || out != "j1\n" {
		t.Errorf("remote --background: %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{
		{"remote", "--background", "-n", "--", "true"},
		{"remote", "--session", "s1", "--background", "--json", "-n", "--", "true"},
	} {
		if _, errOut, code := jaild(t, args...); code != api.ExitUsage || !strings.Contains(errOut, "--session") {
			t.Errorf("%v: %d %q, want a usage error", args, code, errOut)
		}
	}
	for _, args := range [][]string{
		{"remote", "--session", "nope", "-n", "--", "true"},
		{"remote", "--session", "nope", "--json", "-n", "--", "true"},
		{"remote", "--session", "nope", "--background", "-n", "--", "true"},
	} {
		_, errOut, code := jaild(t, args...)
		if code != api.ExitUsage || !strings.Contains(errOut, `no session "nope"`) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%v: %d %q, want 125 and one line naming the session", args, code, errOut)
		}
	}
}
