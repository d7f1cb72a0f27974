package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
)

// RemoteWorkspace is a jail.Workspace that the worker holds for the front
// end: the sandboxes of its runs are the worker's, while its directory is
// reached directly (the front end and the worker share the mount
// namespace). It lives as long as the worker that made it: once that worker
// has exited, Lost is closed and runs fail with ErrDown.
type RemoteWorkspace struct {
	p    *proc
	id   string
	dir  string
	size int64
	uid  int
	gid  int

	mu     sync.Mutex
	closed bool
}

// NewWorkspace asks the worker for a workspace of size bytes (zero: the
// jail's default), as jail.Manager.NewWorkspace makes one. ctx is checked
// before asking; once asked, NewWorkspace waits for the answer (a mount and
// a network namespace, milliseconds), so that no workspace is made for a
// caller that left.
func (c *Client) NewWorkspace(ctx context.Context, size int64) (*RemoteWorkspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := c.current()
	if err != nil {
		return nil, err
	}
	var a wsAnswer
	if err := p.workspaceOp(wsRequest{Op: "create", Size: size}, &a); err != nil {
		return nil, err
	}
	if err := a.Err.decode(); err != nil {
		return nil, err
	}
	return &RemoteWorkspace{p: p, id: a.ID, dir: a.Dir, size: a.Size, uid: a.UID, gid: a.GID}, nil
}

// workspaceOp sends req on a socket of its own and reads the answer into
// a. It waits until the worker answers or exits.
func (p *proc) workspaceOp(req wsRequest, a *wsAnswer) error {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("workspace socketpair: %w", err)
	}
	local := os.NewFile(uintptr(pair[0]), "workspace")
	nc, err := net.FileConn(local)
	local.Close()
	if err != nil {
		unix.Close(pair[1])
		return fmt.Errorf("workspace socket: %w", err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	_, _, err = p.ctl.WriteMsgUnix([]byte{opWorkspace}, unix.UnixRights(pair[1]), nil)
	unix.Close(pair[1])
	if err != nil {
		return p.gone("send the workspace "+req.Op, err)
	}
	if err := writeFrame(conn, req); err != nil {
		return p.gone("send the workspace "+req.Op, err)
	}
	if err := readFrame(conn, a); err != nil {
		return p.gone("answer the workspace "+req.Op, err)
	}
	return nil
}

// ID names the workspace in the worker.
func (w *RemoteWorkspace) ID() string { return w.id }

// Dir is the host path of the workspace's tmpfs; see jail.Workspace.Dir for
// how (not) to resolve paths below it.
func (w *RemoteWorkspace) Dir() string { return w.dir }

// Size is the workspace's capacity in bytes.
func (w *RemoteWorkspace) Size() int64 { return w.size }

// HostIDs are the host uid and gid of the workspace's sandbox user.
func (w *RemoteWorkspace) HostIDs() (uid, gid int) { return w.uid, w.gid }

// Used reports how many bytes of the workspace are in use.
func (w *RemoteWorkspace) Used() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(w.dir, &st); err != nil {
		return 0, fmt.Errorf("workspace %s: %w", w.id, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// Lost is closed once the worker that holds the workspace has exited: the
// workspace went with it (the worker's exit, or the sweep of the next
// worker, removed it).
func (w *RemoteWorkspace) Lost() <-chan struct{} { return w.p.exited }

// Run runs spec in a fresh sandbox on the workspace, with the contract of
// jail.Workspace.Run; spec.ExtraFiles are passed to the worker.
func (w *RemoteWorkspace) Run(ctx context.Context, spec *jail.Spec) (*jail.Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	select {
	case <-w.p.exited:
		return nil, fmt.Errorf("%w: workspace %s went with the worker that held it", ErrDown, w.id)
	default:
	}
	return runOn(ctx, w.p, spec, w.id)
}

// Close asks the worker to remove the workspace (its sandboxes, tmpfs and
// network namespace). It is safe to call more than once; a workspace whose
// worker has exited is already gone.
func (w *RemoteWorkspace) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	select {
	case <-w.p.exited:
		return nil
	default:
	}
	var a wsAnswer
	if err := w.p.workspaceOp(wsRequest{Op: "close", ID: w.id}, &a); err != nil {
		select {
		case <-w.p.exited:
			return nil
		default:
		}
		return err
	}
	if err := a.Err.decode(); err != nil {
		return fmt.Errorf("close workspace %s: %w", w.id, err)
	}
	return nil
}
