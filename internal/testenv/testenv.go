// Package testenv gives tests that start real sandboxes a private jaild
// installation (a state dir and a parent cgroup of their own, so a daemon on
// the same host is never touched) and checks, when the test ends, that the
// installation left nothing on the host: no process, cgroup, container state
// or uid slot; what a failed test did leave is reported, then removed. It also builds the jaild binary for end-to-end tests.
package testenv

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/jail"
)

// WatchdogsOf returns the watchdogs in stateDir whose parent is pid: the
// watchdog of the Manager(s) of process pid.
func WatchdogsOf(stateDir string, pid int) []int {
	var out []int
	for _, w := range Watchdogs(stateDir) {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(w) + "/stat")
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, w)
		}
	}
	return out
}

// StartHelper re-executes the test binary as helper (which its TestMain
// dispatches: a stand-in jaild on in, told the installation by the
// JAILD_TEST_STATE, JAILD_TEST_PARENT and JAILD_TEST_WORKSPACE_ROOT
// environment) and returns once the
// helper says on stdout that it started its sandbox. At cleanup the helper
// is killed and its watchdog given time to tear its sandboxes down, before
// the installation's leak check.
func StartHelper(t testing.TB, in *Install, helper string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", helper)
	cmd.Env = append(os.Environ(), "JAILD_TEST_STATE="+in.StateDir, "JAILD_TEST_PARENT="+in.Parent,
		"JAILD_TEST_WORKSPACE_ROOT="+in.WorkspaceRoot)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for deadline := time.Now().Add(10 * time.Second); len(Watchdogs(in.StateDir)) > 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.Contains(line, "started") {
		t.Fatalf("%s did not start its sandbox: %q", helper, line)
	}
	return cmd
}

// KillWithWatchdog SIGKILLs owner, a process with one Manager on in, and
// that Manager's watchdog, as if both died at once: the owner's sandboxes
// are left to the sweep at the next start. The watchdog is stopped first,
// so that it cannot sweep before it dies.
func KillWithWatchdog(t testing.TB, in *Install, owner *exec.Cmd) {
	t.Helper()
	dogs := WatchdogsOf(in.StateDir, owner.Process.Pid)
	if len(dogs) != 1 {
		t.Fatalf("owner %d has watchdogs %v, want one", owner.Process.Pid, dogs)
	}
	if err := syscall.Kill(dogs[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	if err := syscall.Kill(dogs[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); slices.Contains(Watchdogs(in.StateDir), dogs[0]); {
		if time.Now().After(deadline) {
			t.Fatalf("the killed watchdog %d does not go", dogs[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NeedRoot skips t unless the test runs as root; why says what needs it.
// Tests that start sandboxes need root, and the test command runs as root,
// so nothing skips there.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}

// TokenFile writes a token file holding one fresh token for name, mode
// 0600 as jaild requires, and returns its path and the token.
func TokenFile(t testing.TB, name string) (file, token string) {
	t.Helper()
	token = strings.ToLower(rand.Text())
	file = filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(name+":"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, token
}

// Install is a private jaild installation.
type Install struct {
	StateDir string // under /run, traversable by sandboxes
	Parent   string // cgroup parent: relative on v1, absolute on v2
	// WorkspaceRoot, if set (WithWorkspaceRoot), is a workspace root
	// outside the state dir that the installation's jaild processes use;
	// Check and scrub look there too.
	WorkspaceRoot string
}

// WithWorkspaceRoot gives the installation a workspace root of its own
// outside the state dir (under /run, mode 0700, as jaild wants an
// operator's root), passed to helpers (JAILD_TEST_WORKSPACE_ROOT) and
// daemons (Env); jail.Config users set it themselves. The leak check then
// also asserts that nothing is mounted or left in it, and scrub removes
// it.
func (in *Install) WithWorkspaceRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", filepath.Base(in.StateDir)+"-ws-")
	if err != nil {
		t.Fatal(err)
	}
	in.WorkspaceRoot = dir
	return dir
}

// dirs are the directories the installation's mounts and files are in.
func (in *Install) dirs() []string {
	if in.WorkspaceRoot == "" {
		return []string{in.StateDir}
	}
	return []string{in.StateDir, in.WorkspaceRoot}
}

// New makes an installation named after prefix and registers, at cleanup,
// the check that it left nothing behind, then the removal of its state dir.
// Register the cleanups of what runs on it (managers, daemons) after New,
// so that they run first.
func New(t testing.TB, prefix string) *Install {
	t.Helper()
	// Under /run, not t.TempDir: the sandbox's unprivileged root must be
	// able to traverse every parent of the rootfs template.
	dir, err := os.MkdirTemp("/run", prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	in := &Install{StateDir: dir, Parent: prefix + "-" + hex.EncodeToString(b)}
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		in.Parent = "/" + in.Parent
	}
	t.Cleanup(func() {
		in.Check(t)
		in.scrub()
	})
	return in
}

// scrub removes what Check reports, so that a failed test, whose failure
// Check has already reported, still leaves nothing on the host: it kills
// the processes in the installation's cgroups and its watchdogs (all
// started by the test's sandboxes and Managers), detaches the mounts under
// the state dir, removes the installation's cgroups deepest first, then
// the state dir. Slot files are left to jail's sweep, which removes a
// record whose owner is gone.
func (in *Install) scrub() {
	name := filepath.Base(in.Parent)
	kill := func() int {
		procs := ProcsInCgroup(name)
		for _, p := range procs {
			if pid, err := strconv.Atoi(strings.Fields(p)[0]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, pid := range Watchdogs(in.StateDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(procs)
	}
	for deadline := time.Now().Add(5 * time.Second); kill() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, dir := range in.dirs() {
		mounts := MountsUnder(dir)
		for i := len(mounts) - 1; i >= 0; i-- { // mountinfo lists parents first
			_, mp, _ := strings.Cut(mounts[i], " ")
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	for _, top := range CgroupsNamed(name) {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // children after their parents
			_ = os.Remove(dirs[i])
		}
	}
	os.RemoveAll(in.StateDir)
	if in.WorkspaceRoot != "" {
		os.RemoveAll(in.WorkspaceRoot)
	}
}

// Env is the environment that points jaild processes at the installation.
func (in *Install) Env() []string {
	env := []string{"JAILD_STATE_DIR=" + in.StateDir, "JAILD_CGROUP_PARENT=" + in.Parent}
	if in.WorkspaceRoot != "" {
		env = append(env, "JAILD_WORKSPACE_ROOT="+in.WorkspaceRoot)
	}
	return env
}

// Check fails t if the installation left processes, cgroups, container
// state or uid slots behind.
func (in *Install) Check(t testing.TB) {
	t.Helper()
	name := filepath.Base(in.Parent)
	if procs := ProcsInCgroup(name); len(procs) > 0 {
		t.Errorf("processes left in cgroup %s: %v", name, procs)
	}
	if dirs := CgroupsNamed(name); len(dirs) > 0 {
		t.Errorf("cgroups left behind: %v", dirs)
	}
	if ents, _ := os.ReadDir(filepath.Join(in.StateDir, "containers")); len(ents) > 0 {
		t.Errorf("container state left behind: %d dirs in %s", len(ents), in.StateDir)
	}
	if slots := Slots(in.StateDir); len(slots) > 0 {
		t.Errorf("uid slots still recorded: %v", slots)
	}
	if dogs := Watchdogs(in.StateDir); len(dogs) > 0 {
		t.Errorf("watchdog processes left behind: %v", dogs)
	}
	if mounts := MountsUnder(in.StateDir); len(mounts) > 0 {
		t.Errorf("mounts left under the state dir (workspace tmpfs, netns binds): %v", mounts)
	}
	for _, d := range []string{"workspaces", "netns", "roots"} {
		if ents, _ := os.ReadDir(filepath.Join(in.StateDir, d)); len(ents) > 0 {
			t.Errorf("%d entries left in %s/%s", len(ents), in.StateDir, d)
		}
	}
	if in.WorkspaceRoot != "" {
		if mounts := MountsUnder(in.WorkspaceRoot); len(mounts) > 0 {
			t.Errorf("mounts left under the workspace root: %v", mounts)
		}
		if ents, _ := os.ReadDir(in.WorkspaceRoot); len(ents) > 0 {
			t.Errorf("%d entries left in the workspace root %s", len(ents), in.WorkspaceRoot)
		}
	}
}

// Watchdogs lists the pids of the live (not zombie) watchdog processes of
// Managers whose state dir is stateDir.
func Watchdogs(stateDir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 3 || args[1] != jail.WatchdogArg || !strings.Contains(args[2], `"`+stateDir+"/") {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// MountsUnder lists the mounts of the host's mount namespace (this
// process's) at or below dir, as "type path", nsfs pins included.
func MountsUnder(dir string) []string {
	return mountsIn("/proc/self/mountinfo", dir, true)
}

// MountsBelow lists the mounts below dir, not on it, in the mount namespace
// of the process pid, as MountsUnder does.
func MountsBelow(pid int, dir string) []string {
	return mountsIn("/proc/"+strconv.Itoa(pid)+"/mountinfo", dir, false)
}

// mountsIn lists the mounts below dir, and on it if on, in the mountinfo
// file.
func mountsIn(file, dir string, on bool) []string {
	data, err := os.ReadFile(file)
	if err != nil {
		return []string{"reading mountinfo: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		// id parent major:minor root mountpoint options [optional...] - type source super
		if len(f) < 7 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if !(on && mp == dir) && !strings.HasPrefix(mp, dir+"/") {
			continue
		}
		typ := "?"
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				typ = f[i+1]
				break
			}
		}
		out = append(out, typ+" "+mp)
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// mountinfo's path fields.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ProcsInCgroup describes the host processes whose cgroup path has a
// component name. Zombies are left out: an orphaned sandbox's init, once
// killed, waits for the host's pid 1 to reap it, and holds nothing but a
// pid.
func ProcsInCgroup(name string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(data), "/"+name) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, fmt.Sprintf("%s %q", e.Name(), bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	}
	return out
}

// CgroupsNamed lists the cgroup directories called name, in any hierarchy.
func CgroupsNamed(name string) []string {
	var out []string
	_ = filepath.WalkDir(cgroup.Root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			out = append(out, p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 9 {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// slotRecord is what a uid slot file's record says of its holder.
type slotRecord struct {
	name      string // the slot file's
	ID        string `json:"id"`
	StateRoot string `json:"state_root"`
	Workspace bool   `json:"workspace"`
	Dir       string `json:"dir"`
}

// slotRecords returns the records of the uid slot files that point into
// stateDir.
func slotRecords(stateDir string) []slotRecord {
	var out []slotRecord
	ents, _ := os.ReadDir(jail.SlotDir)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(jail.SlotDir, e.Name()))
		if err != nil {
			continue
		}
		rec := slotRecord{name: e.Name()}
		if json.Unmarshal(data, &rec) == nil && strings.HasPrefix(rec.StateRoot, stateDir+"/") {
			out = append(out, rec)
		}
	}
	return out
}

// Slots lists the uid slot files whose record points into stateDir.
func Slots(stateDir string) []string {
	var out []string
	for _, rec := range slotRecords(stateDir) {
		out = append(out, rec.name)
	}
	return out
}

// Workspaces lists the directories of the workspaces that jaild processes
// on the installation at stateDir hold, as their slot records name them:
// a mount point in the workspace root, or, for a detached workspace (see
// jail.Workspace.Dir), the path through its owner's descriptor, which
// reaches it while the owner lives. A record left by a dead owner still
// counts until a sweep removes it.
func Workspaces(stateDir string) []string {
	var out []string
	for _, rec := range slotRecords(stateDir) {
		if !rec.Workspace {
			continue
		}
		if rec.Dir == "" {
			rec.Dir = filepath.Join(stateDir, "workspaces", rec.ID)
		}
		out = append(out, rec.Dir)
	}
	return out
}

// BuildJaild builds cmd/jaild and cmd/jaild-server from this module into
// dir as they are installed: the lean jaild and, next to it, the complete
// jaild-server that jaild's serve, mcp and remote execute. It returns
// jaild's path and makes dir searchable by everyone (a test may run the
// binary as nobody).
func BuildJaild(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"jaild", "jaild-server"} {
		build := exec.Command("go", "build", "-tags", "seccomp,urfave_cli_no_docs", "-o", filepath.Join(dir, name), "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w\n%s", name, err, out)
		}
	}
	return filepath.Join(dir, "jaild"), nil
}
