package command

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestPrivateMountsFallback: a worker asked to use a mount namespace of its
// own (--private-mounts) that finds its parent's, as when the system
// forbade the front end to make one, does without it and says so; its
// Manager would refuse to bind anything there.
func TestPrivateMountsFallback(t *testing.T) {
	for _, tc := range []struct {
		args []string
		log  string
	}{
		{[]string{"--private-mounts"}, "in the front end's mount namespace"},
		{nil, ""},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		got := true
		app := &cli.App{Flags: Worker.Flags, Action: func(c *cli.Context) error {
			got = privateMounts(c, log)
			return nil
		}}
		if err := app.Run(append([]string{"worker"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if got {
			t.Errorf("worker %q in its parent's mount namespace: private mounts on", tc.args)
		}
		if tc.log == "" && buf.Len() > 0 || !strings.Contains(buf.String(), tc.log) {
			t.Errorf("worker %q logged %q; want %q", tc.args, buf.String(), tc.log)
		}
	}
}
