package session

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/jail"
)

func TestParseState(t *testing.T) {
	rec := func(parts ...string) []byte { return []byte(strings.Join(parts, "\x00") + "\x00") }
	tests := []struct {
		name    string
		data    []byte
		wantErr string
		cwd     string
		env     map[string]string
	}{
		{name: "ok", data: rec(stateMagic, "/work/a", "X=1", "Y=a=b\nc", "PWD=/x", "SHLVL=1", "BASH_FUNC_f%%=() { :; }", "BASH_X=1", "_=/bin/x"),
			cwd: "/work/a", env: map[string]string{"X": "1", "Y": "a=b\nc"}},
		{name: "empty", data: nil, wantErr: "no report"},
		{name: "truncated", data: []byte(stateMagic + "\x00/work"), wantErr: "truncated"},
		{name: "no magic", data: rec("junk", "/work"), wantErr: "not a state report"},
		{name: "junk before magic", data: append([]byte("junk"), rec(stateMagic, "/work")...), wantErr: "not a state report"},
		{name: "relative dir", data: rec(stateMagic, "work"), wantErr: "not absolute"},
		{name: "bad name", data: rec(stateMagic, "/work", "1X=1"), wantErr: "bad variable"},
		{name: "no equals", data: rec(stateMagic, "/work", "X"), wantErr: "bad variable"},
		{name: "duplicate", data: rec(stateMagic, "/work", "X=1", "X=2"), wantErr: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseState(tt.data)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.cwd != tt.cwd || len(st.env) != len(tt.env) {
				t.Fatalf("got %+v", st)
			}
			for k, v := range tt.env {
				if st.env[k] != v {
					t.Errorf("%s = %q, want %q", k, st.env[k], v)
				}
			}
		})
	}
}

func TestReadStateBound(t *testing.T) {
	if _, err := readState(strings.NewReader(strings.Repeat("x", MaxState+1))); err == nil {
		t.Error("a report over MaxState was accepted")
	}
}

func TestStream(t *testing.T) {
	b := newStream(20) // head 10, tail 10
	b.Write([]byte("0123456789"))
	if got, next := b.read(0); got != "0123456789" || next != 10 {
		t.Fatalf("read(0) = %q, %d", got, next)
	}
	b.Write([]byte("abcde"))
	if got, next := b.read(10); got != "abcde" || next != 15 {
		t.Fatalf("read(10) = %q, %d", got, next)
	}
	for range 10 {
		b.Write([]byte("ABCDEFGHIJ")) // forces compaction of the tail
	}
	got, next := b.read(0)
	if want := "0123456789" + jail.Elide(95) + "ABCDEFGHIJ"; got != want || next != 115 {
		t.Fatalf("read(0) = %q, %d; want %q", got, next, want)
	}
	if got, _ := b.read(107); got != "CDEFGHIJ" {
		t.Errorf("read(107) = %q", got)
	}
	if got, _ := b.read(12); got != jail.Elide(93)+"ABCDEFGHIJ" {
		t.Errorf("read(12) = %q", got)
	}
	if got, next := b.read(500); got != "" || next != 115 {
		t.Errorf("read past the end = %q, %d", got, next)
	}
}
