// Package worker splits the daemon in two processes: the front end
// (jaild-server serve or mcp: HTTP, MCP, Prometheus, the run chain) and a
// worker, the lean jaild started as "jaild worker", which owns the
// jail.Manager, the pool and the periodic sweep, and runs sandboxes on the
// front end's request.
//
// The reason is the container init. libcontainer re-executes the binary
// that builds a container (/proc/self/exe) as the container's init, and every
// package init of that binary runs at each sandbox start. Built by the
// worker, every daemon sandbox's init is the lean jaild, whose package inits
// are a fraction of the complete build's.
//
// The two talk over a unix SOCK_SEQPACKET socketpair, the control
// connection, whose front-end end is the worker's fd 3. The worker first
// sends one message: ready, or the error that kept it from building its
// Manager. Then each run is one message from the front end that carries, by
// SCM_RIGHTS, a fresh SOCK_STREAM socket for the run and, as the run needs
// them, a descriptor for the command's stdin and the write ends of pipes for
// its live stdout and stderr (the streams a box.Command's Stdout and Stderr
// writers receive as they are produced). On the run's socket the front end
// sends the spec (one length-prefixed JSON frame) and the worker answers
// with the result and its error (one JSON frame) followed by the kept stdout
// and stderr as raw bytes, never escaped. A run with egress (jail.Egress)
// first gets, on its socket, one byte carrying by SCM_RIGHTS the proxy
// listener the worker made in the sandbox's network namespace: the front
// end serves the proxy on it (package egress) for the run's life, so that
// policy, metrics and audit stay in the front end, and puts its counters in
// the result. The front end half-closes the
// run's socket to cancel the run, as its context ends; the worker kills the
// sandbox and still answers.
//
// A run may also carry the command's ExtraFiles (a session's state pipe,
// fd 3), counted in the message's second byte, and name a workspace the
// worker holds. Workspaces (a session's /work, network namespace and uid
// range, see jail.Workspace) are made and closed by messages that carry only
// a socket, on which the front end sends the operation (create with a size,
// or close with an id) and the worker answers (the workspace's id, host
// directory, size and the host uid and gid of its sandbox user, or the
// error). A create with proxy set (a session with egress) makes the
// workspace jail.WithProxy and, after the answer, sends the listener as a
// run's is (one byte carrying it by SCM_RIGHTS); the front end serves the
// proxy on it for the session's life. The front end reaches the directory
// itself, at the path the worker gives: a descriptor of the worker's
// (detached workspaces), or, where the worker has a mount namespace of its
// own (Config.PrivateMounts), the workspace's path through
// /proc/<worker's pid>/root; files.Open checks that what it finds there is
// the workspace. The worker closes the workspaces it still holds when
// it stops; those of a worker that dies go with it ([RemoteWorkspace.Lost]),
// swept by its watchdog or by the next worker's start.
//
// The worker's life is tied to the front end's: when the control
// connection reaches EOF (the front end closed it, or died, even by
// SIGKILL), the worker cancels every run, closes its pool and Manager, which
// kills and removes every sandbox, and exits. When the worker dies the front
// end starts another. It fails the runs the dead worker had with ErrLost
// (their commands may have run: never to be tried again), and those it
// could not hand to any worker with ErrDown (which the daemon's /healthz
// reports); Client.Up tells when a worker serves again, and the daemon's
// admission holds such runs until then, within their queue wait.
package worker
