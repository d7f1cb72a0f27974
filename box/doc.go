// Package box holds the values that describe one sandboxed run and its
// outcome, apart from the engine that builds sandboxes: the [Limits] of a
// sandbox with their defaults and bounds, the [Command] that runs in it, the
// [Result] it produces (with [EgressUsage]), and the error classes every
// layer reports and package api maps to the wire ([InvalidError] with the
// request field at fault, [ErrCommandNotFound], [ErrNotFound], [ErrBusy],
// [ErrUnavailable], ...).
//
// It imports the standard library only, so that the wire format (package
// api) and the client library (package client) build on any platform and
// never link libcontainer; package jail, the Linux engine, takes and returns
// these values.
//
// The name is the short word for what a sandbox is to its caller: a box a
// command runs in. It is no common local name (spec and sandbox are, and
// package jail has unexported sandbox types), so it reads plainly where it
// is used: box.Limits, box.Command, box.Result, box.ErrBusy.
package box
