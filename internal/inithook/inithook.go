// Package inithook is the re-execution dispatch of jaild's binaries: both,
// and every test binary that builds sandboxes, import it for its init
// function, which turns the process into a container's init, a Manager's
// watchdog or its seccomp probe when the binary was re-executed as one, and
// pins main to the main thread otherwise. Importing it is the binary's
// explicit step (as runc's init.go and moby's reexec.Init are): no package
// of jaild's takes over a process from a package init of its own. Its C
// constructors run before the Go runtime starts: poolwait.c is the init of
// a pooled sandbox, "<binary> pool-wait" (with "seccomp", it loads the
// sandbox's filter first); watchdog.c keeps a Manager's watchdog,
// "<binary> watchdog", dormant until its owner dies.
package inithook

import (
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/jaild/jaild/jail"
)

// init runs in every process of a binary that imports this package, before
// the binary's own package init. libcontainer re-executes the binary as
// "jaild init" to become each container's init;
// that process must go straight into libcontainer.Init, which never returns.
// Each jail.Manager re-executes it as "jaild watchdog", and once as "jaild
// seccomp-probe": jail.MaybeWatchdog never returns in those processes
// either, and lets Managers start them in every other.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
	jail.MaybeWatchdog()
	// libcontainer locks goroutines to OS threads, joins a container's
	// mount namespace on them and lets those threads die. Pinning main to
	// the main thread keeps that from ever happening to the main thread,
	// which Go would otherwise park forever with jaild's view of the mount
	// table pointing into a dead container.
	runtime.LockOSThread()
}
