package session

import (
	"context"
	"net"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// Jail makes the workspaces sessions run on: [Local] over a *jail.Manager
// in the same process, or the daemon's worker client (whose workspaces
// live in the worker process).
type Jail interface {
	// NewWorkspace makes a workspace of size bytes, with a proxy
	// listener in its network namespace if proxy is set
	// (jail.WithProxy), which keeps a sandbox with limits prestart
	// started for its next run if prestart is not nil
	// (jail.WithPrestart).
	NewWorkspace(ctx context.Context, size int64, proxy bool, prestart *box.Limits) (Workspace, error)
}

// Workspace is what a session needs of its workspace: a *jail.Workspace
// (see [Local]), or one a worker holds for the front end.
type Workspace interface {
	// Dir is the host path of the workspace (the sandboxes' working
	// directory), reachable from this process; HostIDs the host uid and
	// gid of its sandbox user.
	Dir() string
	HostIDs() (uid, gid int)
	Size() int64
	Used() (int64, error)
	// Run runs spec in a fresh sandbox on the workspace
	// (jail.Workspace.Run).
	Run(ctx context.Context, spec *jail.Spec) (*box.Result, error)
	// Close removes the workspace; it is safe to call more than once.
	Close() error
	// Lost is closed if the workspace is gone from under the session
	// (the worker that held it exited); nil means never. The session is
	// then removed, and named as lost to its next caller.
	Lost() <-chan struct{}
	// TakeProxyListener hands over the proxy listener of a workspace
	// made with proxy set (jail.Workspace.TakeProxyListener); nil if
	// none.
	TakeProxyListener() net.Listener
}

// Local is a Jail whose workspaces are m's, in this process.
func Local(m *jail.Manager) Jail { return localJail{m} }

type localJail struct{ m *jail.Manager }

func (l localJail) NewWorkspace(_ context.Context, size int64, proxy bool, prestart *box.Limits) (Workspace, error) {
	var opts []jail.WorkspaceOption
	if proxy {
		opts = append(opts, jail.WithProxy())
	}
	if prestart != nil {
		opts = append(opts, jail.WithPrestart(*prestart))
	}
	ws, err := l.m.NewWorkspace(size, opts...)
	if err != nil {
		return nil, err
	}
	return localWorkspace{ws}, nil
}

type localWorkspace struct{ *jail.Workspace }

func (localWorkspace) Lost() <-chan struct{} { return nil }
