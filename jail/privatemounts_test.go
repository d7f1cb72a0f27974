package jail_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/testenv"
	"github.com/jaild/jaild/jail"
)

// inPrivateMounts is set in the copy of the test binary that
// TestPrivateMounts starts in a mount namespace of its own: the pid of the
// test process that started it, in the host's namespace.
const inPrivateMounts = "JAILD_TEST_PRIVATE_MOUNTS"

// TestPrivateMounts: a Manager alone in a mount namespace binds the root
// template's host paths there once. Its sandboxes see /usr as before, read
// only; their configs no longer bind it; and nothing of it reaches the
// namespace it was copied from, while it runs or after. In its parent's
// namespace, New refuses.
func TestPrivateMounts(t *testing.T) {
	requireHost(t)
	if os.Getenv(inPrivateMounts) != "" {
		privateMountsChild(t)
		return
	}
	env := testenv.New(t, "jaild-test")
	cfg := config(env)
	cfg.PrivateMounts = true
	if m, err := jail.New(cfg); err == nil {
		m.Close()
		t.Fatal("New with PrivateMounts in its parent's mount namespace: no error")
	} else if !strings.Contains(err.Error(), "parent's mount namespace") {
		t.Fatalf("New with PrivateMounts in its parent's mount namespace: %v", err)
	}

	// The state dir a shared mount, as much of a systemd host is: a
	// mount made under it in the copy would come back here, unless the
	// copy is made a slave first.
	if err := unix.Mount(env.StateDir, env.StateDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(env.StateDir, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	if err := unix.Mount("", env.StateDir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateMounts$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inPrivateMounts+"="+strings.Join([]string{strconv.Itoa(os.Getpid()), env.StateDir, env.Parent}, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPrivateMounts") {
		t.Fatalf("the test in a mount namespace of its own: %v\n%s", err, out)
	}
	t.Logf("in a mount namespace of its own:\n%s", out)
	if ms := testenv.MountsBelow(os.Getpid(), env.StateDir); len(ms) > 0 {
		t.Errorf("mounts under the state dir here: %v", ms)
	}
}

func privateMountsChild(t *testing.T) {
	// The parent's pid, state dir and cgroup parent: the parent checks
	// what is left on the host.
	args := strings.Split(os.Getenv(inPrivateMounts), ",")
	parent, stateDir := args[0], args[1]
	for _, attached := range []bool{false, true} {
		t.Run(fmt.Sprintf("attached workspaces=%v", attached), func(t *testing.T) {
			jail.SetAttachedOnly(attached)
			defer jail.SetAttachedOnly(false)
			privateMountsManager(t, jail.Config{StateDir: stateDir, CgroupParent: args[2], PrivateMounts: true}, parent)
		})
	}
}

// rootProbe shows what a sandbox sees of its /tmp, working directory,
// /dev/shm, /dev/pts and /dev: owner, group, mode, mount flags, type and
// options (the tmpfs's owners as host uids, which differ between
// sandboxes, left out), whether they take a file, whether /tmp holds more
// than its 1 MiB, a pseudo-terminal's name and owner, and how many mounts
// it has (none from the roots where jaild makes sandboxes' own).
const rootProbe = `
for d in /tmp "$PWD" /dev/shm /dev/pts /dev; do
	stat -c '%n %u %g %a' "$d"
	awk -v d="$d" '$5 == d { for (i = 7; $i != "-"; i++); print $5, $6, $(i+1), $(i+3) }' /proc/self/mountinfo | sed -E 's/,(uid|gid)=[0-9]+//g'
	echo x 2>/dev/null > "$d/f" && echo "$d takes a file"
done
stat -c '%n %u %g %a' /dev/pts/ptmx
head -c 2000000 /dev/zero 2>&1 > /tmp/big | grep -o 'No space left on device'
python3 -c 'import os, pty; m, s = pty.openpty(); n = os.ttyname(s); st = os.stat(n); print(n, st.st_uid, oct(st.st_mode))'
echo "$(wc -l < /proc/self/mountinfo) mounts, $(grep -c /roots/ /proc/self/mountinfo) of roots"
`

var rootProbeSpec = &jail.Spec{Limits: box.Limits{TmpfsSize: 1 << 20}, Command: box.Command{Args: []string{"/bin/sh", "-c", rootProbe}}}

// plainRoot is what a sandbox of a Manager without private mounts shows
// of rootProbe.
func plainRoot(t *testing.T, cfg jail.Config) string {
	cfg.PrivateMounts = false
	plain, err := jail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := plain.Close(); err != nil {
			t.Error(err)
		}
	}()
	res := run(t, plain, rootProbeSpec)
	for _, w := range []string{"/tmp 0 0 1777", "/tmp rw,nosuid,nodev", "tmpfs rw,size=1024k", "/work 1000 1000 755", "/tmp takes a file", "/work takes a file", "/dev/shm takes a file", "No space left on device", "/dev/pts/0 1000 0o20620", " 0 of roots"} {
		if !strings.Contains(string(res.Stdout), w) {
			t.Errorf("a sandbox of a Manager without private mounts shows %q (stderr %q); want %q in it", res.Stdout, res.Stderr, w)
		}
	}
	return string(res.Stdout)
}

// sandboxRoots: a Manager with private mounts makes its sandboxes' /tmp and
// working directory (and, with a shared /dev, their /dev/pts and /dev/shm)
// on a root of their own, leaving them out of their configs; its sandboxes see them as a Manager without private mounts
// gives them, and its namespace keeps none of the roots once their
// sandboxes have started, waiting ones included.
func sandboxRoots(t *testing.T, m *jail.Manager, cfg jail.Config, want string) {
	own := []string{"/tmp", m.WorkDir()}
	if jail.SharedDev(m) {
		own = append(own, "/dev/pts", "/dev/shm")
	}
	ds := jail.MountDestinations(m)
	for _, d := range own {
		if slices.Contains(ds, d) {
			t.Errorf("a sandbox's config still mounts %s: %v", d, ds)
		}
	}
	roots := filepath.Join(cfg.StateDir, "roots")
	got := run(t, m, rootProbeSpec)
	if string(got.Stdout) != want {
		t.Errorf("a sandbox on a root of its own shows\n%s\nwithout private mounts\n%s", got.Stdout, want)
	}
	pool, err := m.NewPool(1, rootProbeSpec.Limits)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i := 0; i < 2; i++ {
		for deadline := time.Now().Add(10 * time.Second); pool.Ready() < 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if ms := testenv.MountsBelow(os.Getpid(), roots); len(ms) > 0 {
			t.Errorf("with %d sandbox waiting, this namespace still holds roots: %v", pool.Ready(), ms)
		}
		res, err := pool.Run(context.Background(), rootProbeSpec)
		if err != nil || string(res.Stdout) != want {
			t.Errorf("a pooled sandbox on a root of its own shows %q, %v; want %q", res.Stdout, err, want)
		}
	}
}

func privateMountsManager(t *testing.T, cfg jail.Config, parent string) {
	stateDir := cfg.StateDir
	parentPid, _ := strconv.Atoi(parent)
	want := plainRoot(t, cfg)
	m, err := jail.New(cfg)
	if err != nil {
		t.Fatalf("New with PrivateMounts: %v", err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if ms := testenv.MountsBelow(os.Getpid(), stateDir); len(ms) > 0 {
			t.Errorf("mounts left in its namespace after Close: %v", ms)
		}
	}()

	ours := testenv.MountsBelow(os.Getpid(), stateDir)
	for _, want := range []string{"/usr", "/etc/ld.so.cache"} {
		if !slices.ContainsFunc(ours, func(p string) bool { return strings.HasSuffix(p, want) }) {
			t.Errorf("no bind of %s in the template (mounts under the state dir: %v)", want, ours)
		}
	}
	if ds := jail.MountDestinations(m); slices.Contains(ds, "/usr") || slices.Contains(ds, "/etc/ld.so.cache") {
		t.Errorf("a sandbox's config still binds the host paths: %v", ds)
	}
	sandboxRoots(t, m, cfg, want)
	res := run(t, m, sh(`
grep -E ' /usr | /etc/ld.so.cache ' /proc/self/mountinfo | cut -d' ' -f5,6
touch /usr/x 2>&1 | grep -o 'Read-only file system'
test -x /usr/bin/sh && echo runs`))
	got := string(res.Stdout)
	for _, want := range []string{"/usr ro,nosuid,nodev", "/etc/ld.so.cache ro,nosuid,nodev", "Read-only file system", "runs"} {
		if !strings.Contains(got, want) {
			t.Errorf("in the sandbox: %q (stderr %q); want %q", got, res.Stderr, want)
		}
	}

	// A workspace, detached or mounted in this namespace only, is reached
	// from the host's namespace at its Dir, as the front end reaches it.
	ws, err := m.NewWorkspace(1 << 20)
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	defer func() {
		if err := ws.Close(); err != nil {
			t.Errorf("Workspace.Close: %v", err)
		}
	}()
	if res, err := m.Run(context.Background(), &jail.Spec{Workspace: ws, Command: box.Command{Args: []string{"/bin/sh", "-c", "echo from-the-sandbox > /work/f"}}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("a run on the workspace: %+v, %v", res, err)
	}
	out, err := exec.Command("nsenter", "--mount=/proc/"+parent+"/ns/mnt", "--", "cat", ws.Dir()+"/f").CombinedOutput()
	if err != nil || string(out) != "from-the-sandbox\n" {
		t.Errorf("the workspace's file read at %s from the host's namespace: %q, %v", ws.Dir(), out, err)
	}
	if ms := testenv.MountsBelow(parentPid, stateDir); len(ms) > 0 {
		t.Errorf("the host's namespace sees mounts under the state dir: %v", ms)
	}

	// A host path replaced by a rename (as ldconfig replaces
	// /etc/ld.so.cache) is bound again for the next sandbox.
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "cache"), filepath.Join(dir, "bound")
	for p, data := range map[string]string{src: "old", dst: ""} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unmount, err := jail.BindAndRefresh(src, dst, func() {
		if err := os.WriteFile(src+".new", []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(src+".new", src); err != nil {
			t.Fatal(err)
		}
	})
	if unmount != nil {
		defer func() {
			if err := unmount(); err != nil {
				t.Error(err)
			}
		}()
	}
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(dst); string(data) != "new" {
		t.Errorf("after the source's replacement the bind shows %q; want %q", data, "new")
	}
	if err := os.WriteFile(dst, []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to the bind: %v; want EROFS", err)
	}
}
