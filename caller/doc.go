// Package caller names who asks the daemon for something, as the daemon
// knows it from the connection: a bearer token's name, a unix socket
// peer's uid (SO_PEERCRED), or a TCP peer's IP address.
//
// An [ID] is what sessions belong to and what per-owner quotas count. It is
// compared whole, kind and name: a uid is never the same caller as a token
// or an address, and two uids are never the same caller. Its String form,
// for the audit log and the policy's input, is not an identity: derive
// owners from the ID itself.
package caller
