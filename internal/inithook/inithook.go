package main

import (
	"os"
	"runtime"

	"github.com/jaild/jaild/jail"
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// init runs before anything else in every process of this binary. libcontainer
// re-executes the binary as "jaild init" to become each container's init;
// that process must go straight into libcontainer.Init, which never returns.
// Each jail.Manager re-executes it as "jaild watchdog", which tears the
// Manager's sandboxes down if jaild dies; jail.Watchdog never returns either.
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
	if len(os.Args) > 1 && os.Args[1] == jail.WatchdogArg {
		jail.Watchdog()
	}
}
