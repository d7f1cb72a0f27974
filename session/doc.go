// Package session keeps an agent's workspace across calls while every call
// still runs in a fresh sandbox.
//
// A [Session] owns a [jail.Workspace]: a size-capped tmpfs mounted at the
// working directory ([Config.WorkDir], /work by default) in each of its
// sandboxes, a network namespace (loopback only) they all
// join, and the uid range they all map. Each call ([Session.Run]) and each
// background job ([Session.Start]) gets a sandbox of its own (fresh pid,
// mount, IPC, UTS, user and cgroup namespaces, its own cgroup limits,
// seccomp, read-only root and fresh /tmp), so a fork bomb or an OOM in one
// call leaves the session usable for the next, while files, a server
// listening on loopback, the working directory and exported variables carry
// over. A session created with Options.Egress has, in its network namespace,
// a proxy listener ([jail.WithProxy]) on which its Egress is served for the
// session's life: every call and job gets the proxy variables, and that
// proxy is the only way out.
//
// # Working directory and environment
//
// A session has a current directory (the working directory or below it;
// the working directory at first, or [Options.Cwd]) and an environment ([Options.Env], [Session.SetEnv]). A call
// starts in the session's directory, unless the call names its own
// (Call.Dir, for that call only); a directory that no longer exists falls
// back to the working directory. A call's environment is the sandbox's fixed one, then the
// session's, then the call's own Env (for that call only).
//
// A shell call (Call.Shell) runs its script with Call.ShellPath -c (the
// shell the front end runs the same command in without a session: /bin/sh,
// the default, for /run and /raw; --shell-path for the MCP bash tool), after
// a first line that installs an EXIT trap. When the script ends, the trap
// writes, with builtins only and in any POSIX shell, the shell's physical
// working directory (cd -P .) and `export -p` to a pipe on fd 3 that jaild
// reads, bounded ([MaxState]), and parses strictly with mvdan.cc/sh's
// parser: only `export NAME='value'` (dash, bash in posix mode) or
// `declare -x NAME="value"` (bash) statements whose values are quoted
// literals; anything else discards the whole report. The session then
// takes:
//
//   - the directory, if it is the working directory or below it; any
//     other (/tmp is fresh in every call) resets the session's directory
//     to the working directory;
//   - the exported variables as its new environment, so `export X=1` and
//     `unset X` both carry over, except the shell's own bookkeeping, which
//     never does: PWD, OLDPWD, SHLVL, _, SHELLOPTS, BASHOPTS, BASH_ENV,
//     ENV, BASH_*, exported functions (which `export -p` does not list)
//     and exported arrays (which no shell passes on), and neither do the
//     dynamic loader's and the shells' hooks (LD_*, GCONV_PATH, PS4...). A variable the
//     call's own Env set and the script left unchanged keeps its previous
//     session value (or stays unset): a call's Env is for that call.
//
// The report cannot be made unforgeable: it describes the script's own
// shell, and the script runs in that shell, as the same user, before the
// trap; whatever the trap could use to prove itself (a secret in its text,
// an fd, the order of writes) the script can read or use first, and it can
// exec so that the trap never runs. So the report starts with a per-call
// nonce that only the trap's text holds, which stops a literal shell
// string from forging one, and what any report carries is bounded on
// jaild's side: the loader's and the shells' hooks (LD_*, GCONV_PATH, PS4,
// ENV... see neverCarried) never carry over, and whatever does is in the
// environment the policy sees at the next call (Call.Check). A shell that
// is killed (timeout, OOM, cancellation) or that execs another program
// runs no trap, and the session keeps its previous directory and
// environment. Argv calls
// (Call.Args) and background jobs never change them.
//
// # Background jobs
//
// [Session.Start] runs a call in its own sandbox without waiting for it
// (a shell call with Call.ShellPath -c, without the trap),
// with a timeout up to [Config.MaxJobTimeout]. Its output is kept as it
// arrives, bounded like a call's (head and tail with [box.Elide]'s marker
// between), and can be read from an offset while it runs ([Session.Job]);
// [Session.Wait] blocks until it ends, [Session.WaitOutput] until it ends
// or writes past an offset, [Session.Kill] kills it. A running
// job keeps its session from expiring for idleness.
//
// # Where the workspaces are
//
// A [Manager] makes workspaces through a [Jail]: [Local] over a
// *jail.Manager in the same process, or the daemon's worker client, whose
// workspaces live in the worker process while their directory is reached
// from this one. Where its directory is, the Jail decides (the daemon's
// --workspace-root, jail.Config.WorkspaceRoot); a session, and the files
// API, only ever reach it by [Session.Dir]. A workspace that goes from
// under its session (the worker
// died: [Workspace.Lost]) takes the session with it: the next Get says it
// was lost, and the expiry goroutine removes the rest.
//
// Unless [Config.NoPrestart] is set, a session's workspace keeps one
// sandbox started for its next call or job, with the session's limits,
// waiting in the pool's init ([jail.WithPrestart]). A call takes it if it
// can serve the call (the same tmpfs size; other memory, pids and CPU
// limits are set on it) and otherwise builds its own; either way a sandbox
// runs one call and is destroyed, and the next one is started at once.
//
// Work done on a session's files outside its sandboxes (the files API)
// holds the session with [Session.Use] and works below [Session.Dir],
// writing as [Session.HostIDs]; a front end hands the session to such a
// handler with [NewContext].
//
// # Lifetime
//
// A session expires when it has been idle (no call or job running) for its
// TTL, or when it reaches [Config.MaxLifetime] whatever it runs; a
// goroutine of the [Manager] removes expired sessions. Removing a session
// ([Manager.Delete], expiry, [Manager.Close]) kills its calls and jobs,
// waits for their sandboxes to be destroyed, then unmounts and removes the
// workspace and the network namespace without reading them; file transfers
// in progress are told to stop first ([Session.Closing]) and are never
// waited on. A session attached to a front end's own session (an MCP
// session's) counts in a quota of its own per owner, is kept while it is
// held ([Session.Hold]: its client is connected) and otherwise expires after
// the shorter idle time of its kind; the owner's idlest one is evicted
// before a new one is refused. [Manager.Drain] refuses new sessions and
// removes each one once it has been idle for the drain's idle time, so
// that a daemon going away serves the sessions in use to the end.
//
// Sessions do not survive their jaild. A jaild that is SIGKILLed leaves its
// workspaces' slot records behind, and the next jaild's start (or any
// sweep) removes their sandboxes, tmpfs mounts and network namespaces:
// "removed on start". See docs/sessions.md for why.
package session
