package main

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/testdaemon"
)

// TestRemoteBackgroundAndMissingSession: jaild remote --session S
// --background starts a job and prints its id; a session that is not there
// is a usage error with one line, not "command not found".
func TestRemoteBackgroundAndMissingSession(t *testing.T) {
	startDaemon(t, testdaemon.Options{})
	id := newSession(t)
	out, errOut, code := jaild(t, "remote", "--session", id, "--background", "-n", "--", "sleep", "100")
	job := strings.TrimSuffix(out, "\n")
	if code != 0 || job == "" || strings.Contains(job, "\n") {
		t.Fatalf("remote --background: %d %q %q", code, out, errOut)
	}
	if out, _, code := jaild(t, "jobs", id); code != 0 || !strings.Contains(out, job+" ") || !strings.Contains(out, "sleep 100") || !strings.Contains(out, "running") {
		t.Errorf("jobs %s after remote --background: %d %q", id, code, out)
	}
	for _, args := range [][]string{
		{"remote", "--background", "-n", "--", "true"},
		{"remote", "--session", id, "--background", "--json", "-n", "--", "true"},
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
