// Package sessionfake is a stand-in for the daemon's session endpoints
// (api/session.go), for the tests of front ends (client, the CLI): sessions
// and jobs kept in memory, files served by the real session/files handler
// over a temporary directory per session, and /raw and /run recording the
// requests they get. It builds no sandbox and needs no root.
package sessionfake
