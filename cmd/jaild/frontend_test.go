package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLeanBuild checks what the lean build links: none of the front ends'
// packages, whose inits would run again in every sandbox's init process.
func TestLeanBuild(t *testing.T) {
	heavy := []string{
		"github.com/jaild/jaild/server",
		"github.com/modelcontextprotocol/go-sdk/mcp",
		"github.com/prometheus/client_golang/prometheus",
		"net/http",
		"github.com/jaild/jaild/policy",
		"github.com/open-policy-agent/opa/v1/rego",
		"mvdan.cc/sh/v3/syntax",
		"github.com/fsnotify/fsnotify",
	}
	deps := func(tags string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %s: %v", tags, err)
		}
		set := make(map[string]bool)
		for _, p := range strings.Fields(string(out)) {
			set[p] = true
		}
		return set
	}
	lean, full := deps("seccomp,jaild_lean"), deps("seccomp")
	for _, p := range heavy {
		if !full[p] {
			t.Errorf("the complete build does not link %s; update this test's list", p)
		}
		if lean[p] {
			t.Errorf("the lean build links %s", p)
		}
	}
	// Nothing of the policy engine's modules at all: OPA alone has
	// hundreds of packages with inits.
	for p := range lean {
		for _, mod := range []string{"github.com/open-policy-agent/", "mvdan.cc/sh/", "github.com/fsnotify/"} {
			if strings.HasPrefix(p, mod) {
				t.Errorf("the lean build links %s", p)
			}
		}
	}
	for _, p := range []string{"github.com/jaild/jaild/jail", "github.com/opencontainers/runc/libcontainer/nsenter"} {
		if !lean[p] {
			t.Errorf("the lean build does not link %s", p)
		}
	}
}

// TestFrontEndStandIns runs the lean build's serve, mcp and remote, which
// execute jaild-server next to it.
func TestFrontEndStandIns(t *testing.T) {
	for cmd, flag := range map[string]string{"serve": "--max-concurrent", "mcp": "--pool", "remote": "--token-file"} {
		out, err := exec.Command(jaildBin, cmd, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("jaild %s --help: %v\n%s", cmd, err, out)
		}
		if !strings.Contains(string(out), flag) {
			t.Errorf("jaild %s --help does not show jaild-server's %s flag:\n%s", cmd, flag, out)
		}
	}

	// Without jaild-server next to it: a clear error and jaild's own code.
	dir := t.TempDir()
	data, err := os.ReadFile(jaildBin)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "jaild")
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lone, "serve").CombinedOutput()
	if code := exitCode(err); code != exitInternal {
		t.Errorf("lone jaild serve: exit %d, want %d\n%s", code, exitInternal, out)
	}
	if want := filepath.Join(dir, "jaild-server"); !strings.Contains(string(out), want) {
		t.Errorf("lone jaild serve: error does not name %s: %s", want, out)
	}
	// A jaild-server that others could have replaced is never run.
	if err := os.WriteFile(filepath.Join(dir, "jaild-server"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "jaild-server"), 0o777); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(lone, "serve").CombinedOutput()
	if code := exitCode(err); code != exitInternal || strings.Contains(string(out), "ran") || !strings.Contains(string(out), "writable by group or others") {
		t.Errorf("lone jaild serve next to a world-writable jaild-server: exit %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(dir, "jaild-server")); err != nil {
		t.Fatal(err)
	}

	// doctor warns, and still passes: run and doctor need no front end.
	in := newInstall(t)
	doctor := in.cmd("doctor")
	doctor.Path, doctor.Args[0] = lone, lone
	out, err = doctor.CombinedOutput()
	if err != nil {
		t.Fatalf("lone jaild doctor: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "warn     front ends") {
		t.Errorf("lone jaild doctor does not warn about the front ends:\n%s", out)
	}
}
