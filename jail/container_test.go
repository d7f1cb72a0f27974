package jail_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/jail"
)

// TestCheckContainer: doctor says whether jaild runs in a container and
// what sandboxes get of NOFILE. Run on a host it must say "no";
// scripts/container-test.sh checks the "yes" inside a container.
func TestCheckContainer(t *testing.T) {
	got := map[string]string{}
	for _, f := range jail.Check() {
		got[f.Name] = f.Detail
	}
	if !strings.Contains(got["rlimits"], "NOFILE") {
		t.Errorf("rlimits: %q, want the NOFILE the sandboxes get", got["rlimits"])
	}
	c, ok := got["container"]
	if !ok {
		t.Fatal("no container finding")
	}
	if ns, _ := os.Readlink("/proc/self/ns/pid"); ns != "pid:[4026531836]" {
		t.Skipf("not on a host (pid namespace %s); container finding: %s", ns, c)
	}
	if c != "no: on the host" {
		t.Errorf("container: %q on a host", c)
	}
}
