package jail_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"golang.org/x/sys/unix"
)

// probeHarness runs each probe (a Python expression) in a child process of
// its own, so that one a filter kills takes no other with it, and prints
// "name<TAB>ok", "name<TAB>ERRNO-NAME" or the name of another exception per
// probe. raw makes a syscall by number with integer or buffer arguments.
const probeHarness = `
import ctypes, errno, json, os, socket, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def raw(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[a if isinstance(a, (bytes, ctypes.Array)) else ctypes.c_long(a) for a in args])
    if r < 0:
        raise OSError(ctypes.get_errno(), "")
    return r
def check(cond):
    if not cond:
        raise AssertionError
for name, expr in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        try:
            eval(expr)
            res = "ok"
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
        except Exception as e:
            res = type(e).__name__
        print(name + "\t" + res, flush=True)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        print(name + "\tkilled by signal %d" % os.WTERMSIG(st), flush=True)
`

type probe struct {
	name string
	expr string // Python, with raw, check, socket, os, ctypes, subprocess, threading
	want string // "ok" or the errno's name
}

// runProbes runs every probe in one sandbox and returns each one's result.
func runProbes(t *testing.T, m *jail.Manager, probes []probe) map[string]string {
	t.Helper()
	python := "/usr/bin/python3" // the host's /usr is the sandbox's
	if _, err := os.Stat(python); err != nil {
		t.Skipf("needs %s on the host: %v", python, err)
	}
	var list strings.Builder
	list.WriteString("[")
	for i, p := range probes {
		if i > 0 {
			list.WriteString(",")
		}
		fmt.Fprintf(&list, "[%q,%q]", p.name, p.expr)
	}
	list.WriteString("]")
	res := run(t, m, &jail.Spec{Command: box.Command{
		Args: []string{python, "-c", probeHarness, list.String()}, Timeout: 30 * time.Second,
	}})
	if res.ExitCode != 0 {
		t.Fatalf("probe harness: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if name, result, ok := strings.Cut(line, "\t"); ok {
			got[name] = result
		}
	}
	return got
}

// TestSeccomp checks what the filter allows and refuses, call by call, in a
// real sandbox: the address families socket accepts, personality's safe
// values, the calls that reach other processes or the kernel's less guarded
// corners, and what a syscall newer than the filter returns.
func TestSeccomp(t *testing.T) {
	m := newManager(t)
	call := func(nr uintptr, args ...int64) string {
		s := fmt.Sprintf("raw(%d", nr)
		for _, a := range args {
			s += fmt.Sprintf(", %d", a)
		}
		return s + ")"
	}
	const sockStream = unix.SOCK_STREAM
	probes := []probe{
		// Socket families: the four a sandbox needs work, the rest fail as
		// on a kernel without them.
		{"socket AF_UNIX", "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)", "ok"},
		{"socket AF_INET", "socket.socket(socket.AF_INET, socket.SOCK_STREAM)", "ok"},
		{"socket AF_INET6", "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)", "ok"},
		{"socket AF_NETLINK", "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)", "ok"},
		{"socketpair AF_UNIX", "socket.socketpair(socket.AF_UNIX)", "ok"},
		{"AF_INET6 loopback round trip", "(lambda s: (s.bind(('::1', 0)), s.listen(), socket.create_connection(s.getsockname()[:2]).send(b'x'), check(s.accept()[0].recv(1) == b'x')))(socket.socket(socket.AF_INET6))", "ok"},
		{"socket AF_VSOCK", "socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)", "EAFNOSUPPORT"},
		{"socketpair AF_VSOCK", fmt.Sprintf("raw(%d, %d, %d, 0, ctypes.create_string_buffer(8))", unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM), "EAFNOSUPPORT"},
		{"socket AF_PACKET", "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)", "EAFNOSUPPORT"},
		{"socket AF_ALG", "socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET)", "EAFNOSUPPORT"},
		{"socket AF_UNSPEC", call(unix.SYS_SOCKET, unix.AF_UNSPEC, sockStream, 0), "EAFNOSUPPORT"},
		{"socket AF_AX25", call(unix.SYS_SOCKET, unix.AF_AX25, sockStream, 0), "EAFNOSUPPORT"},
		{"socket AF_BRIDGE", call(unix.SYS_SOCKET, unix.AF_BRIDGE, sockStream, 0), "EAFNOSUPPORT"},
		{"socket AF_X25", call(unix.SYS_SOCKET, unix.AF_X25, sockStream, 0), "EAFNOSUPPORT"},
		{"socket AF_KEY", call(unix.SYS_SOCKET, unix.AF_KEY, sockStream, 0), "EAFNOSUPPORT"},
		{"socketpair AF_INET", fmt.Sprintf("raw(%d, %d, %d, 0, ctypes.create_string_buffer(8))", unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM), "EAFNOSUPPORT"},
		// The kernel reads the family as an int: AF_INET with a high bit
		// set must not pass as AF_INET.
		{"socket AF_INET with high bits", call(unix.SYS_SOCKET, 1<<32|unix.AF_INET, sockStream, 0), "EAFNOSUPPORT"},

		{"personality query", call(unix.SYS_PERSONALITY, 0xffffffff), "ok"},
		{"personality PER_LINUX", call(unix.SYS_PERSONALITY, 0), "ok"},
		{"personality READ_IMPLIES_EXEC", call(unix.SYS_PERSONALITY, 0x0400000), "EPERM"},
		{"personality ADDR_NO_RANDOMIZE", call(unix.SYS_PERSONALITY, 0x0040000), "EPERM"},

		{"pidfd_open and pidfd_send_signal", fmt.Sprintf("raw(%d, raw(%d, os.getpid(), 0), 0, 0, 0)", unix.SYS_PIDFD_SEND_SIGNAL, unix.SYS_PIDFD_OPEN), "ok"},
		{"pidfd_getfd", fmt.Sprintf("raw(%d, raw(%d, os.getpid(), 0), 0, 0)", unix.SYS_PIDFD_GETFD, unix.SYS_PIDFD_OPEN), "EPERM"},

		// clone3's flags are out of the filter's sight: ENOSYS, so that
		// libc falls back to clone, whose flags it checks.
		{"clone3", call(unix.SYS_CLONE3, 0, 0), "ENOSYS"},
		{"clone CLONE_NEWUSER", call(unix.SYS_CLONE, unix.CLONE_NEWUSER|int64(unix.SIGCHLD), 0, 0, 0, 0) + " or os._exit(0)", "EPERM"},
		{"threads", "[(t.start(), t.join()) for t in [threading.Thread(target=int)]]", "ok"},
		{"subprocess", "subprocess.run(['/bin/true'], check=True)", "ok"},

		// A syscall this kernel has and the filter does not know (it came
		// after every one the filter names) gets ENOSYS, as on an older
		// kernel, not success.
		{"file_getattr (newer than the filter)", fmt.Sprintf("raw(%d, %d, b'/work', ctypes.create_string_buffer(64), 24, 0)", unix.SYS_FILE_GETATTR, unix.AT_FDCWD), "ENOSYS"},

		// Denied before the allowlist, and each would work for an
		// unprivileged process without the filter.
		{"keyctl", call(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1), "EPERM"},
		{"unshare CLONE_NEWUSER", call(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), "EPERM"},
		{"ptrace TRACEME", call(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0), "EPERM"},
		{"kcmp self", fmt.Sprintf("raw(%d, os.getpid(), os.getpid(), 0, 1, 1)", unix.SYS_KCMP), "EPERM"},
		{"userfaultfd", call(unix.SYS_USERFAULTFD, 1), "EPERM"}, // UFFD_USER_MODE_ONLY
		{"io_uring_setup", fmt.Sprintf("raw(%d, 1, ctypes.create_string_buffer(120))", unix.SYS_IO_URING_SETUP), "EPERM"},
		{"name_to_handle_at", fmt.Sprintf("raw(%d, %d, b'/work', ctypes.create_string_buffer(136), ctypes.create_string_buffer(4), 0)", unix.SYS_NAME_TO_HANDLE_AT, unix.AT_FDCWD), "EPERM"},
	}
	if runtime.GOARCH == "amd64" {
		const sysModifyLDT = 154 // x86 only: no unix.SYS_MODIFY_LDT on arm64
		probes = append(probes, probe{"modify_ldt read", fmt.Sprintf("raw(%d, 0, ctypes.create_string_buffer(64), 64)", sysModifyLDT), "EPERM"})
	}
	got := runProbes(t, m, probes)
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			if got[p.name] != p.want {
				t.Errorf("%s: got %q, want %s", p.expr, got[p.name], p.want)
			}
		})
	}
}

// TestSeccompOrdinaryPrograms runs everyday work under the allowlist: a C
// compiler and its program (threads, fork, posix_spawn), Python serving and
// fetching over loopback with threads and a subprocess, and a pipeline.
func TestSeccompOrdinaryPrograms(t *testing.T) {
	m := newManager(t)
	const cProgram = `
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static void *f(void *a) { return a; }
int main(void) {
	pthread_t t; void *r; int st; pid_t p;
	pthread_create(&t, 0, f, (void *)42); pthread_join(t, &r);
	if ((p = fork()) == 0) _exit(7);
	waitpid(p, &st, 0);
	char *argv[] = {"echo", "spawned", 0};
	posix_spawnp(&p, "echo", 0, 0, argv, environ); waitpid(p, 0, 0);
	printf("thread %ld child %d\n", (long)r, WEXITSTATUS(st));
	return 0;
}`
	const pyServer = `
import http.server, subprocess, threading, urllib.request
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print(urllib.request.urlopen("http://localhost:%d/" % srv.server_port).status)
print(subprocess.run(["sh", "-c", "echo sub"], capture_output=True, text=True).stdout.strip())
`
	tests := []struct {
		name, tool, script, stdin, want string
	}{
		{"cc", "/usr/bin/cc", "cat > /work/t.c && cc -pthread -o /work/t /work/t.c && /work/t", cProgram, "spawned\nthread 42 child 7\n"},
		{"python loopback", "/usr/bin/python3", "python3 -c \"$(cat)\" 2>/dev/null", pyServer, "200\nsub\n"},
		{"pipeline", "/bin/sh", "seq 1 1000 | sort -rn | head -2 | tr '\\n' ' '; ls / | grep -c work", "", "1000 999 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := exec.LookPath(tt.tool); err != nil {
				t.Skipf("needs %s on the host: %v", tt.tool, err)
			}
			spec := sh(tt.script)
			spec.Stdin = strings.NewReader(tt.stdin)
			spec.Timeout = time.Minute
			res := run(t, m, spec)
			if res.ExitCode != 0 || res.Stdout != tt.want {
				t.Errorf("exit %d stdout %q stderr %q; want stdout %q", res.ExitCode, res.Stdout, res.Stderr, tt.want)
			}
		})
	}
}
