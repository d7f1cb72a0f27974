package jail_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/jaild/jaild/jail"
)

// TestWorkspaceProxy: a workspace made WithProxy has the listener on
// 127.0.0.1:3128 in its namespace, handed over once; every sandbox on it
// sees the proxy variables and reaches the caller's listener; a plain
// workspace has neither.
func TestWorkspaceProxy(t *testing.T) {
	m := newManager(t)
	ws := newWorkspace(t, m, 0, jail.WithProxy())
	ln := ws.TakeProxyListener()
	if ln == nil || ln.Addr().String() != "127.0.0.1:3128" {
		t.Fatalf("proxy listener %v", ln)
	}
	defer ln.Close()
	if ws.TakeProxyListener() != nil {
		t.Error("the listener was handed over twice")
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("got " + line))
			c.Close()
		}
	}()
	for i := range 2 {
		res := run(t, m, inWS(ws, `bash -c 'echo "$HTTPS_PROXY"; exec 3<>/dev/tcp/127.0.0.1/3128; echo hello >&3; cat <&3'`))
		if res.Stdout != "http://127.0.0.1:3128\ngot hello\n" {
			t.Errorf("sandbox %d: %+v", i, res)
		}
	}
	plain := newWorkspace(t, m, 0)
	if plain.TakeProxyListener() != nil {
		t.Error("a plain workspace has a proxy listener")
	}
	res := run(t, m, inWS(plain, `bash -c 'echo "[$HTTPS_PROXY]"; exec 3<>/dev/tcp/127.0.0.1/3128' || echo refused`))
	if res.Stdout != "[]\nrefused\n" || !strings.Contains(res.Stderr, "refused") {
		t.Errorf("plain workspace: %+v", res)
	}
}

// BenchmarkWorkspace: making and closing a workspace, without and with
// the proxy listener (a session with egress).
func BenchmarkWorkspace(b *testing.B) {
	m := newManager(b)
	for _, tc := range []struct {
		name string
		opts []jail.WorkspaceOption
	}{{"plain", nil}, {"proxy", []jail.WorkspaceOption{jail.WithProxy()}}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				ws, err := m.NewWorkspace(0, tc.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if err := ws.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
