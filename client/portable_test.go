package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLeafBuildsAnywhere: the client library, the wire format and package
// box build for a platform without sandboxes, without cgo, and link no
// engine: of jaild's packages they import only each other, and nothing of
// libcontainer.
func TestLeafBuildsAnywhere(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool")
		}
	}
	const mod = "github.com/jaild/jaild/"
	allowed := map[string]bool{mod + "client": true, mod + "api": true, mod + "box": true}
	pkgs := []string{mod + "client", mod + "api", mod + "box"}
	for _, goos := range []string{"darwin", "windows"} {
		env := append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		list := exec.Command(goTool, append([]string{"list", "-deps"}, pkgs...)...)
		list.Env = env
		out, err := list.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go list -deps: %v\n%s", goos, err, stderrOf(err))
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "libcontainer") || (strings.HasPrefix(dep, mod) && !allowed[dep]) {
				t.Errorf("GOOS=%s: client, api or box depends on %s", goos, dep)
			}
		}
		build := exec.Command(goTool, append([]string{"build"}, pkgs...)...)
		build.Env = env
		if out, err := build.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s go build: %v\n%s", goos, err, out)
		}
	}
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
