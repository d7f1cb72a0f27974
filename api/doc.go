// Package api is jaild's wire format, shared by the daemon and its clients:
// the request of POST /run and /raw and its strict decoding into the
// limits and the command of a run (package box's values), the /run answer, the /raw events, error answers, the audit
// record, and [Outcome], the one table that maps a run's error or result to
// its error code, verdict, HTTP status and exit status.
//
// Every JSON field name of the API lives in wire.go. The package imports
// no package of jaild's but box, and nothing platform-specific, so that
// package client builds wherever Go does and never links the engine
// (TestLeafBuildsAnywhere holds it). It is lean too (no net/http): jaild run
// links it, and jaild run's binary is every sandbox's init.
package api
