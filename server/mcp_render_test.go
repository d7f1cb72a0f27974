package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
)

// TestMCPOutputCapCountsCharacters: the bash tool's cap counts characters
// (an agent's Bash tool's 30000), and cuts none in two.
func TestMCPOutputCapCountsCharacters(t *testing.T) {
	const n = 40000
	var asked int64
	f := requestRunner(func(ctx context.Context, req run.Request) (*box.Result, error) {
		asked = req.Spec.MaxOutput
		out := strings.Repeat("é", n)
		return &box.Result{Stdout: out, StdoutBytes: int64(len(out))}, nil
	})
	cs := connectRunner(t, f, MCPOptions{})
	res, out := call(t, cs, "bash", map[string]any{"command": "x"})
	if asked < MCPCaptureBytes(DefaultMCPMaxOutput) {
		t.Errorf("the sandbox was asked to keep %d bytes, want at least %d", asked, MCPCaptureBytes(DefaultMCPMaxOutput))
	}
	chars := utf8.RuneCountInString(out.Stdout)
	if !utf8.ValidString(out.Stdout) || strings.ContainsRune(out.Stdout, utf8.RuneError) {
		t.Errorf("stdout is not whole characters")
	}
	if chars > DefaultMCPMaxOutput || chars < DefaultMCPMaxOutput-10 || !out.StdoutTruncated {
		t.Errorf("kept %d characters (truncated %v), want about %d", chars, out.StdoutTruncated, DefaultMCPMaxOutput)
	}
	if !strings.Contains(text(res), "bytes of output elided") {
		t.Errorf("no marker in the text")
	}
}

func TestCapChars(t *testing.T) {
	stream := strings.Repeat("aé€😀", 1000) // 10 bytes, 4 characters each
	total := int64(len(stream))
	// What the sandbox kept at 400 bytes: head, its marker, tail.
	cut := stream[:180] + box.Elide(total-360) + stream[len(stream)-180:]
	for _, tt := range []struct {
		name string
		s    string
		max  int64
	}{
		{"whole stream", stream, 100},
		{"whole stream, odd cap", stream, 101},
		{"already cut by the sandbox", cut, 100},
		{"cap below the marker", stream, 10},
	} {
		got, did := capChars(tt.s, tt.max, total)
		if !did || int64(utf8.RuneCountInString(got)) > tt.max || !utf8.ValidString(got) {
			t.Errorf("%s: %q (%d characters), cut %v", tt.name, got, utf8.RuneCountInString(got), did)
			continue
		}
		i := strings.Index(got, "\n[... jaild: ")
		if i < 0 {
			if tt.max >= int64(len(box.Elide(total))) || !strings.HasPrefix(stream, got) {
				t.Errorf("%s: no marker in %q", tt.name, got)
			}
			continue
		}
		var elided int64
		fmt.Sscanf(got[i+1:], "[... jaild: %d bytes", &elided)
		head, tail := got[:i], got[strings.Index(got[i+1:], "\n")+i+2:]
		if !strings.HasPrefix(stream, head) || !strings.HasSuffix(stream, tail) || int64(len(head)+len(tail))+elided != total {
			t.Errorf("%s: head %q, tail %q, elided %d of %d", tt.name, head, tail, elided, total)
		}
	}
	if got, did := capChars("short", 100, 5); did || got != "short" {
		t.Errorf("under the cap: %q %v", got, did)
	}
}
