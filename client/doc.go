// Package client calls a jaild daemon over HTTP(S) or a unix socket: POST
// /run for a whole result, POST /raw to stream output as it comes. It is
// what jaild remote and the load generator use, and links neither the
// daemon nor its metrics or MCP packages.
package client
