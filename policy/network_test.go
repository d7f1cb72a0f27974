package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

const networkRego = `package sandbox.network

default allow := false

allow if {
	input.port == 443
	endswith(input.host, ".pypi.org")
}

allow if {
	input.caller == "ci"
	input.host == "api.github.com"
}
`

const mainRego = `package sandbox.main

default allow := true
`

func TestAllowNetwork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		mode    Mode
		in      NetworkInput
		allow   bool
		wantErr bool
	}{
		{"allowed by host and port", map[string]string{"main.rego": mainRego, "network.rego": networkRego}, Enforce, NetworkInput{Host: "files.pypi.org", Port: 443}, true, false},
		{"wrong port", map[string]string{"main.rego": mainRego, "network.rego": networkRego}, Enforce, NetworkInput{Host: "files.pypi.org", Port: 80}, false, false},
		{"by caller", map[string]string{"main.rego": mainRego, "network.rego": networkRego}, Enforce, NetworkInput{Host: "api.github.com", Port: 443, Caller: "ci"}, true, false},
		{"other caller", map[string]string{"main.rego": mainRego, "network.rego": networkRego}, Enforce, NetworkInput{Host: "api.github.com", Port: 443, Caller: "bob"}, false, false},
		{"no network package: undefined denies", map[string]string{"main.rego": mainRego}, Enforce, NetworkInput{Host: "files.pypi.org", Port: 443}, false, false},
		{"shadow reports and allows", map[string]string{"main.rego": mainRego, "network.rego": networkRego}, Shadow, NetworkInput{Host: "evil.test", Port: 443}, true, false},
		{"deny-all", map[string]string{"main.rego": "package sandbox.main\nallow if {"}, Enforce, NetworkInput{Host: "files.pypi.org", Port: 443}, false, true},
		{"evaluation error", map[string]string{"main.rego": mainRego, "network.rego": "package sandbox.network\nallow := true if input.port > 0\nallow := false if input.port > 1\n"}, Enforce, NetworkInput{Host: "x.test", Port: 5}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				must(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
			}
			e, err := Open(Options{Dir: dir, Mode: tc.mode, NoWatch: true})
			must(t, err)
			t.Cleanup(func() { e.Close() })
			allow, err := e.AllowNetwork(context.Background(), tc.in)
			if allow != tc.allow || (err != nil) != tc.wantErr {
				t.Errorf("AllowNetwork(%+v) = %v, %v; want %v, error %v", tc.in, allow, err, tc.allow, tc.wantErr)
			}
		})
	}
}
