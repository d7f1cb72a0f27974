package command

import (
	"os"
	"slices"
	"strings"
)

// The sandboxes' inits run with GOMAXPROCS=1 unless the operator set
// GOMAXPROCS. libcontainer passes one variable of the environment of the
// process that builds a sandbox, GOMAXPROCS, and no other, to the
// sandbox's init: a Go process that lives for a few milliseconds and does
// single-threaded work. Left unset, each init's runtime sizes itself for
// every CPU of the host (a P, its caches and, on a GC, a worker per CPU),
// CPU that a host with many cores pays at every start (docs/performance.md
// has the figures). The variable is the only way in, so whoever starts a
// process that builds sandboxes puts it in that process's environment: the
// front end in its worker's (BuilderEnv), and jaild run and jaild doctor,
// which build their own, in theirs (forSandboxInits). The watchdog a
// builder starts inherits it, and needs no more.
const initGOMAXPROCS = "1"

// BuilderEnv is env (os.Environ's form) for a process that builds
// sandboxes: with GOMAXPROCS=1 added unless env sets GOMAXPROCS. added
// says whether it was added; that process should then size its own Go
// runtime as if it were unset (WorkerOptions.DefaultGOMAXPROCS).
func BuilderEnv(env []string) (out []string, added bool) {
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		return env, false
	}
	return append(slices.Clip(env), "GOMAXPROCS="+initGOMAXPROCS), true
}

// forSandboxInits gives the sandboxes that this process builds itself (a
// one-shot jaild run, jaild doctor's self-test) inits with GOMAXPROCS=1,
// through this process's environment, unless the operator set it. This
// process's own runtime read its setting at its start and keeps it.
func forSandboxInits() {
	if _, ok := os.LookupEnv("GOMAXPROCS"); !ok {
		os.Setenv("GOMAXPROCS", initGOMAXPROCS)
	}
}
