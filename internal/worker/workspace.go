package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/internal/fdpass"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/jail"
)

// RemoteWorkspace is a jail.Workspace that the worker holds for the front
// end: the sandboxes of its runs are the worker's, while its directory is
// reached directly, at the path the worker gave (jail.Workspace.Dir: it
// leads through /proc/<worker's pid>). It lives as long as the worker that
// made it: once that worker has exited, Lost is closed and runs fail with
// ErrLost.
type RemoteWorkspace struct {
	p    *proc
	id   string
	dir  string
	size int64
	uid  int
	gid  int

	mu     sync.Mutex
	closed bool
	proxy  net.Listener // until taken
}

// NewWorkspace asks the worker for a workspace of size bytes (zero: the
// jail's default), as jail.Manager.NewWorkspace makes one, with a proxy
// listener in its network namespace if proxy is set (jail.WithProxy),
// which the worker passes here: TakeProxyListener gives it; and, if
// prestart is not nil, a sandbox with those limits kept started for its
// next run (jail.WithPrestart). ctx is checked
// before asking; once asked, NewWorkspace waits for the answer (a mount and
// a network namespace, milliseconds), so that no workspace is made for a
// caller that left.
func (c *Client) NewWorkspace(ctx context.Context, size int64, proxy bool, prestart *box.Limits) (*RemoteWorkspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := c.current()
	if err != nil {
		return nil, err
	}
	var a wsAnswer
	ln, err := p.workspaceOp(wsRequest{Op: "create", Size: size, Proxy: proxy, Prestart: prestart}, &a)
	if err != nil {
		if a.ID != "" && a.Err == nil {
			// Made, but its listener did not come: not left held.
			return nil, errors.Join(err, (&RemoteWorkspace{p: p, id: a.ID}).Close())
		}
		return nil, err
	}
	if err := a.Err.decode(); err != nil {
		return nil, err
	}
	w := &RemoteWorkspace{p: p, id: a.ID, dir: a.Dir, size: a.Size, uid: a.UID, gid: a.GID, proxy: ln}
	if proxy && ln == nil {
		return nil, errors.Join(errors.New("worker: no proxy listener came with the workspace"), w.Close())
	}
	return w, nil
}

// TakeProxyListener hands the proxy listener of a workspace made with
// proxy set to the caller, who serves and closes it; nil if there is none
// or it was taken.
func (w *RemoteWorkspace) TakeProxyListener() net.Listener {
	w.mu.Lock()
	defer w.mu.Unlock()
	ln := w.proxy
	w.proxy = nil
	return ln
}

// workspaceOp sends req on a socket of its own and reads the answer into
// a, and, for a create with Proxy set that succeeded, the proxy listener
// that follows it. It waits until the worker answers or exits.
func (p *proc) workspaceOp(req wsRequest, a *wsAnswer) (net.Listener, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace socketpair: %w", err)
	}
	local := os.NewFile(uintptr(pair[0]), "workspace")
	nc, err := net.FileConn(local)
	local.Close()
	if err != nil {
		unix.Close(pair[1])
		return nil, fmt.Errorf("workspace socket: %w", err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	_, _, err = p.ctl.WriteMsgUnix([]byte{opWorkspace}, unix.UnixRights(pair[1]), nil)
	unix.Close(pair[1])
	if err != nil {
		return nil, p.gone("send the workspace "+req.Op, err)
	}
	if err := writeFrame(conn, req); err != nil {
		return nil, p.gone("send the workspace "+req.Op, err)
	}
	if err := readFrame(conn, a); err != nil {
		return nil, p.gone("answer the workspace "+req.Op, err)
	}
	if !req.Proxy || a.Err != nil {
		return nil, nil
	}
	ln, err := receiveWorkspaceListener(conn)
	if err != nil {
		return nil, p.gone("pass the workspace's proxy listener", err)
	}
	return ln, nil
}

// receiveWorkspaceListener reads the egressMark that carries a workspace's
// proxy listener.
func receiveWorkspaceListener(conn *net.UnixConn) (net.Listener, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, err
	}
	fds, err := fdpass.Parse(oob[:oobn])
	if err == nil && (n != 1 || b[0] != egressMark || len(fds) != 1 || flags&unix.MSG_CTRUNC != 0) {
		err = fmt.Errorf("proxy listener message of %d bytes with %d descriptors", n, len(fds))
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fds[0]), "egress")
	ln, err := net.FileListener(f) // a close-on-exec duplicate
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("proxy listener: %w", err)
	}
	return ln, nil
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
func (w *RemoteWorkspace) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	select {
	case <-w.p.exited:
		return nil, fmt.Errorf("%w: workspace %s went with it", ErrLost, w.id)
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
	if w.proxy != nil {
		w.proxy.Close()
		w.proxy = nil
	}
	w.mu.Unlock()
	select {
	case <-w.p.exited:
		return nil
	default:
	}
	var a wsAnswer
	if _, err := w.p.workspaceOp(wsRequest{Op: "close", ID: w.id}, &a); err != nil {
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
