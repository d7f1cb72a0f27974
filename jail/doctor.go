package jail

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

// Finding is one preflight check of the host.
type Finding struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Detail   string `json:"detail"`
}

// Check inspects the host for what sandboxes need, without changing it.
func Check() []Finding {
	var fs []Finding
	add := func(name string, ok, required bool, format string, args ...any) {
		fs = append(fs, Finding{Name: name, OK: ok, Required: required, Detail: fmt.Sprintf(format, args...)})
	}
	add("root", os.Geteuid() == 0, true, "euid %d", os.Geteuid())

	var uts unix.Utsname
	_ = unix.Uname(&uts)
	add("kernel", true, false, "%s", unix.ByteSliceToString(uts.Release[:]))

	if err := checkUserns(); err != nil {
		add("user namespaces", false, true, "%v", err)
	} else {
		add("user namespaces", true, true, "available")
	}

	mode, err := cgroup.Detect()
	if err != nil {
		add("cgroups", false, true, "%v", err)
	} else {
		add("cgroups", true, true, "cgroup %s", mode)
		missing := cgroup.MissingControllers(mode, "memory", "pids", "cpu")
		add("cgroup controllers", len(missing) == 0, true, "memory, pids, cpu: %s", orNone(missing, "all present"))
		if mode == cgroup.V2 {
			add("cgroup delegation", true, false, "%s", cgroup.DescribeV2Placement())
		}
		fs = append(fs, checkContainer(mode))
	}

	fs = append(fs, checkRlimits())

	fsys, _ := os.ReadFile("/proc/filesystems")
	overlay := strings.Contains(string(fsys), "\toverlay\n")
	if !overlay {
		// Not loaded yet is fine: the kernel loads it on first use.
		mods, _ := os.ReadFile("/lib/modules/" + unix.ByteSliceToString(uts.Release[:]) + "/modules.dep")
		overlay = strings.Contains(string(mods), "/overlay.ko")
	}
	add("overlayfs", overlay, false,
		"seals the init binary cheaply for each sandbox; without it libcontainer copies the binary every time")

	if detachedMountsWork() {
		add("detached workspaces", true, false, "a session's workspace is mounted nowhere (with the default workspace root): a sandbox's start costs the same however many sessions live")
	} else {
		add("detached workspaces", false, false, "this kernel cannot bind a detached mount into a sandbox (Linux 6.15 and later can): each session's workspace is a mount in jaild's namespace, which every sandbox's start copies")
	}

	kseccomp, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	switch {
	case !seccomp.Enabled:
		add("seccomp", false, true, "jaild was built without the seccomp tag (go build -tags seccomp, needs libseccomp-dev)")
	case len(kseccomp) == 0:
		add("seccomp", false, true, "the kernel has no seccomp filter support")
	default:
		add("seccomp", true, true, "compiled in, kernel actions: %s", strings.TrimSpace(string(kseccomp)))
		if _, err := probeSeccomp(); err != nil {
			add("seccomp probe", false, false, "waiting sandboxes have libcontainer compile the filter in each init: %v", err)
		} else {
			add("seccomp probe", true, false, "waiting sandboxes load the filter libcontainer compiled once, read back with ptrace")
		}
	}
	return fs
}

func orNone(missing []string, none string) string {
	if len(missing) == 0 {
		return none
	}
	return "missing " + strings.Join(missing, ", ")
}

// SelfTest runs `true` in a real sandbox: the one check that proves the
// whole chain works on this host.
func (m *Manager) SelfTest(ctx context.Context) error {
	res, err := m.Run(ctx, &Spec{Command: box.Command{Args: []string{"/bin/sh", "-c", "exit 0"}}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("self test exited %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}
