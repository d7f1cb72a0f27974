package jail_test

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/jail"
)

// devScript lists /dev (names, types, device numbers, modes; not owners,
// which differ: the init's links are its root's, the shared /dev's host
// root's) and uses every device the way programs do.
const devScript = `cd /dev && for f in * pts/ptmx; do stat -c '%n %F %t:%T %a' "$f"; done
echo x > /dev/null && echo null-write
test "$(head -c 3 /dev/zero | od -An -tx1 | tr -d ' ')" = 000000 && echo zero
test "$(head -c 16 /dev/urandom | wc -c)" = 16 && test "$(head -c 16 /dev/random | wc -c)" = 16 && echo random
echo x 2>/dev/null > /dev/full || echo full-refuses
(: < /dev/tty) 2>/dev/null || echo no-tty
echo in | cat /dev/stdin; echo out > /dev/stdout; ls /dev/fd/ | grep -c . > /dev/null && echo fd
python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s).rsplit("/", 1)[0])' 2>/dev/null || echo pty-unavailable
echo shm > /dev/shm/x && cat /dev/shm/x
touch /dev/x 2>/dev/null || echo dev-not-writable
test -w /dev || echo dev-no-write-permission
grep -c ' /dev ' /proc/self/mounts`

// TestDev checks that the shared /dev that sandboxes bind is the /dev that
// libcontainer's init makes: the same entries, and every device works.
func TestDev(t *testing.T) {
	requireHost(t)
	shared := newManager(t)
	own := newManager(t)
	if !jail.UnshareDev(own) {
		t.Log("this kernel has no detached mounts: both Managers' sandboxes make their own /dev")
	}
	a := run(t, shared, sh(devScript))
	b := run(t, own, sh(devScript))
	if a.Stdout != b.Stdout {
		t.Errorf("shared /dev:\n%s\nthe init's own:\n%s", a.Stdout, b.Stdout)
	}
	for _, want := range []string{"\nnull character special file 1:3 666", "urandom character special file 1:9 666",
		"tty character special file 5:0 666", "ptmx symbolic link", "pts directory", "shm directory",
		"null-write", "zero", "random", "full-refuses", "no-tty", "in\nout\nfd", "shm\n", "dev-not-writable", "dev-no-write-permission"} {
		if !strings.Contains(a.Stdout, want) {
			t.Errorf("shared /dev: no %q in\n%s\nstderr %s", want, a.Stdout, a.Stderr)
		}
	}
}
