// Package layers holds the test of jaild's import graph, and nothing else.
// A request flows down the layers below, and no package may import one of
// a layer above its own: a layer knows nothing of who calls it.
//
//	front end  cmd/..., server, client, route, internal/command,
//	           internal/inithook, internal/testdaemon, internal/testenv,
//	           scripts/..., deploy/...
//	run        run
//	policy     policy, egress
//	session    session, session/files
//	jail       jail, internal/worker
//	host       rootfs, cgroup, fdstore
//	leaf       box, api, caller, internal/fdpass, internal/pidfile,
//	           internal/sibling, internal/benchstat, internal/doclinks,
//	           internal/layers
//
// A package may import one of its own layer or of any layer below. The
// worker is in jail's layer: it is a jail.Manager in a process of its own,
// and may use no more of jaild than jail may. Every package of the module
// is in exactly one layer, so that a new package is placed on purpose.
//
// Narrower rules hold for the packages that programs outside the daemon
// link, which must stay light and build anywhere: box imports nothing of
// jaild's, api only box, client and route only api and box, caller nothing.
//
// Only the imports of non-test files count, under the default build tags
// and under seccomp's. Tests may import across layers: a package's tests
// may build a whole daemon.
package layers
