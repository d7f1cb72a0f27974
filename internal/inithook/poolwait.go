package inithook

// The C constructor in poolwait.c turns a process started as
// "<binary> pool-wait" into a pooled sandbox's init before the Go runtime
// starts (see jail/pool.go); the one in watchdog.c holds a Manager's
// watchdog there until its owner dies (see jail/watchdog.go).

// #cgo CFLAGS: -Wall -Werror -O2
import "C"
