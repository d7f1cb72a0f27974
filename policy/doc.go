// Package policy decides, before a sandbox is built, whether a request may
// run: a Rego policy set, evaluated with the Open Policy Agent Go SDK,
// answers data.sandbox.main.allow for an Input, and anything but true is a
// deny. It sits between the front ends and the jail (front end -> policy ->
// jail) and imports nothing of jaild's: the caller injects how commands
// resolve (Resolver; Root resolves in a root laid out as jaild's) and how
// decisions are counted (Observer).
//
// An Engine loads every .rego file under a directory and keeps it live:
// fsnotify on the tree, a debounced reload, an atomic swap of the prepared
// query. It fails closed: a set that does not load puts the engine in
// deny-all until a valid set loads, and an evaluation error is a deny.
// Denials carry the policy-runner convention's messages ("Command not
// allowed: <cmd>" and the rest), and directories written for that
// convention load unchanged: its router, package sandbox.main reading
// data.sandbox[input.command].allow, is a recursion error in OPA v1 as
// written, so the command packages are loaded under a root of their own and
// the router's references rewritten to it (load.go).
//
// In shell mode the command string is parsed (mvdan.cc/sh) into every
// simple command it would run, so that a policy can require each to be
// allowed and deny what it cannot see (Shell.Dynamic); see ParseShell. A
// set written for argv requests is asked about each command instead
// (ShellEach), and jaild refuses what is dynamic itself.
//
// A deny explains itself when the set does: Decision.Reasons are its
// ReasonsQuery and DenyQuery messages, asked only after a deny, and
// Decision.DeniedCommand the shell string's simple command refused
// (explain.go).
//
// Two caches keep a decision cheap, each exact: Root's resolutions, valid
// while the directories and files they depend on are unchanged
// (resolvecache.go), and each set's answers to recent inputs, kept only
// for sets whose answer depends on nothing but the input
// (decisioncache.go).
//
// docs/policy.md has the design notes; examples/policy a router, one module
// per case, and their Rego unit tests.
package policy
