package jail

import "runtime"

// Builds of workspaces' prestarted sandboxes that no run waits for yet (a
// new session's first, a taken one's replacement, a hot workspace's extra
// ones) go through the Manager's prestart gate: at most
// Config.PrestartBuilds of them at once. A build is a Go process start and
// a container init, ~15 ms of CPU; a burst of session creates, each
// starting one at once, would otherwise take every core from the creates
// and runs that callers wait for (measured on a 2-core VM: 20 serial
// creates at 1 ms each without prestarted builds, up to 59 ms beside
// them). The gate only orders the builds: the same are made, later.
//
// A run that finds no sandbox ready but its workspace's builds queued at
// the gate lets one of them through at once (a token in prestarted.hurry):
// it never waits longer than one build, as before. A queued build of a
// workspace closed or gone dormant meanwhile is not made.

// defaultPrestartBuilds is Config.PrestartBuilds' default: half the CPUs
// this process's Go runtime uses (GOMAXPROCS: in a container, its CPU
// limit, not the host's CPUs), at least one.
func defaultPrestartBuilds() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// prestartGate bounds the prestarted builds under way; nil bounds none.
type prestartGate chan struct{}

func newPrestartGate(n int) prestartGate {
	switch {
	case n == 0:
		n = defaultPrestartBuilds()
	case n < 0:
		return nil
	}
	return make(prestartGate, n)
}

// enter waits for a place at the gate, a token from hurry, or stop to be
// closed. It reports whether the build goes on (not stopped), and returns
// what ends its place (a no-op if it got none).
func (g prestartGate) enter(hurry, stop <-chan struct{}) (leave func(), ok bool) {
	if g == nil {
		return func() {}, true
	}
	select {
	case g <- struct{}{}:
		return func() { <-g }, true
	case <-hurry:
		return func() {}, true
	case <-stop:
		return func() {}, false
	}
}
