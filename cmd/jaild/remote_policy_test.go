package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/policy"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// lockedBuffer is a bytes.Buffer written by the engine's decisions and read
// by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// okBase is a jail stand-in: every run exits 0 with no output. The test
// is about what reaches the policy, not about sandboxes.
type okBase struct{}

func (okBase) Run(ctx context.Context, s *jail.Spec) (*box.Result, error) {
	return &box.Result{ID: "fake", Duration: time.Millisecond}, nil
}

// TestRemoteEnvReachesPolicy runs jaild remote against a daemon whose
// policy logs every decision with env values: the env --keep-env forwards,
// in both of the convention's forms, is input.env, and nothing else is;
// RUN_REMOTE_SERVER, a /raw URL, names the daemon when no flag does.
func TestRemoteEnvReachesPolicy(t *testing.T) {
	dir := writePolicy(t, map[string]string{"main.rego": `package sandbox.main

default allow := false

allow if not input.env.FORBIDDEN
`})
	var dlog lockedBuffer
	e, err := policy.Open(policy.Options{Dir: dir, NoWatch: true, DecisionLog: &dlog, LogEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r, err := run.Chain(okBase{}, run.ChainOptions{Policy: e})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	rawURL := "http://" + ln.Addr().String() + "/raw"

	base := []string{"PATH=/usr/bin:/bin", "RUN_REMOTE_SERVER=" + rawURL, "API_TOKEN=s3cret", "CI=true", "HOME=/root", "FORBIDDEN=1"}
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantEnv  map[string]string
		wantCode int
	}{
		{name: "comma form", args: []string{"--keep-env=API_TOKEN,CI"}, wantEnv: map[string]string{"API_TOKEN": "s3cret", "CI": "true"}},
		{name: "two-arg form", args: []string{"--keep-env", "API_TOKEN"}, wantEnv: map[string]string{"API_TOKEN": "s3cret"}},
		{name: "repeated", args: []string{"--keep-env", "CI", "--keep-env", "API_TOKEN"}, wantEnv: map[string]string{"API_TOKEN": "s3cret", "CI": "true"}},
		{name: "unset name", args: []string{"--keep-env=NOT_SET,CI"}, wantEnv: map[string]string{"CI": "true"}},
		{name: "none", wantEnv: map[string]string{}},
		{name: "denied by env", args: []string{"--keep-env", "FORBIDDEN"}, wantEnv: map[string]string{"FORBIDDEN": "1"}, wantCode: 125},
		{name: "flag beats RUN_REMOTE_SERVER", args: []string{"--server", rawURL, "--keep-env=CI"},
			env: []string{"RUN_REMOTE_SERVER=http://127.0.0.1:1/raw"}, wantEnv: map[string]string{"CI": "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(dlog.lines())
			if dlog.lines()[0] == "" {
				before = 0
			}
			args := append(append([]string{"remote", "--no-stdin"}, tt.args...), "--", "true")
			cmd := exec.Command(jaildBin, args...)
			cmd.Env = append(append([]string{}, base...), tt.env...)
			out, err := cmd.CombinedOutput()
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", got, tt.wantCode, out)
			}
			lines := dlog.lines()
			if len(lines) != before+1 {
				t.Fatalf("%d decisions logged, want 1:\n%s", len(lines)-before, strings.Join(lines[before:], "\n"))
			}
			var d struct {
				Input struct {
					Env      map[string]string `json:"env"`
					FrontEnd string            `json:"front_end"`
				} `json:"input"`
			}
			if err := json.Unmarshal([]byte(lines[before]), &d); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(d.Input.Env, tt.wantEnv) || d.Input.FrontEnd != "raw" {
				t.Errorf("the policy saw env %v from %q, want %v from raw", d.Input.Env, d.Input.FrontEnd, tt.wantEnv)
			}
			if tt.wantCode != 0 && !strings.Contains(string(out), "Command not allowed: true") {
				t.Errorf("denial not reported:\n%s", out)
			}
		})
	}
}
