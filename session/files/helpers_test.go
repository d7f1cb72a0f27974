package files_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/session/files"
)

// The ids the test's workspaces belong to, as a sandbox range's would.
const wsUID, wsGID = 100000, 100000

// host is what a test's attacks must not reach: a canary file and an
// empty directory next to the workspace, and the host's /etc/passwd.
type host struct {
	root    files.Root
	canary  string // file outside the workspace
	outside string // directory outside the workspace, empty
	passwd  [32]byte
}

const canaryText = "canary: must never change\n"

// newWorkspace mounts a tmpfs of size bytes, owned by wsUID, in a new
// temporary directory (not nodev, so that a test can mknod in it as
// sandboxed code cannot in production), and unmounts it at cleanup. Next
// to it: a canary file and an empty directory.
func newWorkspace(t testing.TB, size int64) *host {
	t.Helper()
	testenv.NeedRoot(t, "the workspace is a tmpfs mounted by the test")
	dir := t.TempDir()
	h := &host{
		root:    files.Root{Dir: filepath.Join(dir, "ws"), UID: wsUID, GID: wsGID},
		canary:  filepath.Join(dir, "canary"),
		outside: filepath.Join(dir, "outside"),
		passwd:  hashFile(t, "/etc/passwd"),
	}
	for _, d := range []string{h.root.Dir, h.outside} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.canary, []byte(canaryText), 0o666); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,mode=0755,uid=%d,gid=%d", size, wsUID, wsGID)
	if err := unix.Mount("jaild-files-test", h.root.Dir, "tmpfs", unix.MS_NOSUID, opts); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(h.root.Dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", h.root.Dir, err)
		}
	})
	return h
}

func hashFile(t testing.TB, p string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// check fails t if anything outside the workspace changed.
func (h *host) check(t testing.TB) {
	t.Helper()
	if data, err := os.ReadFile(h.canary); err != nil || string(data) != canaryText {
		t.Errorf("canary changed: %q, %v", data, err)
	}
	if st, err := os.Lstat(h.canary); err != nil || st.Mode() != 0o666 && st.Mode() != 0o644 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("canary's mode or owner changed: %v %v", st, err)
	}
	if ents, err := os.ReadDir(h.outside); err != nil || len(ents) > 0 {
		t.Errorf("directory outside the workspace: %d entries, %v", len(ents), err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(h.root.Dir)); len(ents) != 3 {
		t.Errorf("the workspace's parent holds %d entries, want 3 (ws, canary, outside)", len(ents))
	}
	if hashFile(t, "/etc/passwd") != h.passwd {
		t.Error("/etc/passwd changed")
	}
}

// path is the host path of a workspace path; for the test's own setup
// and checks only.
func (h *host) path(p string) string { return filepath.Join(h.root.Dir, p) }

// layout builds what a hostile sandbox would leave, as the sandbox user:
// a script of lines "d NAME", "f NAME CONTENT", "l NAME TARGET" (symlink),
// "h NAME OLD" (hard link), "p NAME" (fifo), "c NAME" (a device node:
// /dev/zero's), "b NAME" (a block device: loop0's). TARGETs may use
// {outside} and {canary}.
func (h *host) layout(t *testing.T, script string) {
	t.Helper()
	r := strings.NewReplacer("{outside}", h.outside, "{canary}", h.canary)
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		f := strings.SplitN(strings.TrimSpace(line), " ", 3)
		p := h.path(f[1])
		var err error
		switch f[0] {
		case "d":
			err = os.Mkdir(p, 0o755)
		case "f":
			err = os.WriteFile(p, []byte(f[2]), 0o644)
		case "l":
			err = os.Symlink(r.Replace(f[2]), p)
		case "h":
			err = os.Link(h.path(f[2]), p)
		case "p":
			err = unix.Mkfifo(p, 0o644)
		case "c":
			err = unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5)))
		case "b":
			err = unix.Mknod(p, unix.S_IFBLK|0o666, int(unix.Mkdev(7, 0)))
		default:
			t.Fatalf("layout: %q", line)
		}
		if err == nil {
			err = os.Lchown(p, wsUID, wsGID)
		}
		if err != nil {
			t.Fatalf("layout %q: %v", line, err)
		}
	}
}

// handler serves the workspace as the daemon would.
func (h *host) handler(o files.Options) *files.Handler {
	return files.NewHandler(func(*http.Request) (files.Root, error) { return h.root, nil }, o)
}

// do sends one request to hd with the path value p, as the daemon's mux
// would set it (so that a path the mux would clean reaches the handler
// as sent), and returns the answer.
func do(hd http.Handler, method, p string, body []byte, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/sessions/s/files/x", bytes.NewReader(body))
	r.SetPathValue("path", p)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	hd.ServeHTTP(w, r)
	return w
}

// owner is the uid and gid of a workspace entry (not followed).
func (h *host) owner(t *testing.T, p string) (uint32, uint32, fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(h.path(p))
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Uid, s.Gid, st.Mode()
}

func httptestRequest(method, p, body string) *http.Request {
	r := httptest.NewRequest(method, "/sessions/s/files/x", strings.NewReader(body))
	r.SetPathValue("path", p)
	return r
}

func serve(hd http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	hd.ServeHTTP(w, r)
	return w
}
