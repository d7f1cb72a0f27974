// Package inithook is the libcontainer init hook of jaild's binaries: both
// import it for its init function, which turns the process into a
// container's init when the binary was re-executed as one, and pins main to
// the main thread otherwise. Its C constructors run before the Go runtime
// starts: poolwait.c is the init of a pooled sandbox, "<binary> pool-wait";
// watchdog.c keeps a Manager's watchdog, "<binary> watchdog", dormant until
// its owner dies.
package inithook

import (
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// init runs in every process of a binary that imports this package, before
// the binary's own package init. libcontainer re-executes the binary as
// "jaild init" to become each container's init;
// that process must go straight into libcontainer.Init, which never returns.
// (Each jail.Manager also re-executes it as "jaild watchdog"; package
// jail's own init handles that.)
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
	// libcontainer locks goroutines to OS threads, joins a container's
	// mount namespace on them and lets those threads die. Pinning main to
	// the main thread keeps that from ever happening to the main thread,
	// which Go would otherwise park forever with jaild's view of the mount
	// table pointing into a dead container.
	runtime.LockOSThread()
}
