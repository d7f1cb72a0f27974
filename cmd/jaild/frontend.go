//go:build !jaild_lean

package main

import "github.com/jaild/jaild/jail"

// frontEnds is jaild doctor's finding on the front ends, which the complete
// build carries itself (see frontend_lean.go for the lean build's).
func frontEnds() jail.Finding {
	return jail.Finding{Name: "front ends", OK: true, Detail: "serve, mcp and remote built in"}
}
