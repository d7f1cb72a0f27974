package worker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// fakeWorkspace records what reaches it: runs (which write their argv to
// the first extra file) and Close.
type fakeWorkspace struct {
	id     string
	mu     sync.Mutex
	runs   []string
	closed bool
	proxy  net.Listener
	// prestart is what the create asked for (jail.WithPrestart).
	prestart *box.Limits
}

func (w *fakeWorkspace) TakeProxyListener() net.Listener {
	w.mu.Lock()
	defer w.mu.Unlock()
	ln := w.proxy
	w.proxy = nil
	return ln
}

func (w *fakeWorkspace) ID() string              { return w.id }
func (w *fakeWorkspace) Dir() string             { return "/nonexistent/" + w.id }
func (w *fakeWorkspace) Size() int64             { return 4096 }
func (w *fakeWorkspace) HostIDs() (uid, gid int) { return 1001, 1002 }
func (w *fakeWorkspace) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

func (w *fakeWorkspace) Run(ctx context.Context, spec *jail.Spec) (*box.Result, error) {
	w.mu.Lock()
	w.runs = append(w.runs, strings.Join(spec.Args, " "))
	w.mu.Unlock()
	for _, f := range spec.ExtraFiles {
		if _, err := io.WriteString(f, "state of "+w.id); err != nil {
			return nil, err
		}
	}
	return &box.Result{ExitCode: len(spec.ExtraFiles)}, nil
}

func (w *fakeWorkspace) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// TestWorkspacesCrossTheWire: a workspace is made (with the limits of the
// sandbox to prestart, if any), run on (with an extra file passed by
// SCM_RIGHTS) and closed in the worker; an unknown one is
// ErrNoWorkspace; what the front end did not close is closed when Serve
// ends.
func TestWorkspacesCrossTheWire(t *testing.T) {
	var mu sync.Mutex
	var made []*fakeWorkspace
	ws := func(size int64, proxy bool, prestart *box.Limits) (Workspace, error) {
		if size == 1 {
			return nil, &box.InvalidError{Field: "workspace size", Reason: "too small"}
		}
		mu.Lock()
		defer mu.Unlock()
		w := &fakeWorkspace{id: "ws" + string(rune('a'+len(made))), prestart: prestart}
		if proxy {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			w.proxy = ln
		}
		made = append(made, w)
		return w, nil
	}
	var leftOpen *fakeWorkspace
	t.Run("session", func(t *testing.T) {
		p := pairWith(t, fake{}, ws)
		c := &Client{cur: p}
		ctx := context.Background()
		if _, err := c.NewWorkspace(ctx, 1, false, nil); !box.IsInvalid(err) {
			t.Errorf("NewWorkspace(1) = %v, want the worker's invalid error", err)
		}
		w, err := c.NewWorkspace(ctx, 0, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if w.ID() != "wsa" || w.Dir() != "/nonexistent/wsa" || w.Size() != 4096 {
			t.Errorf("workspace %+v", w)
		}
		if uid, gid := w.HostIDs(); uid != 1001 || gid != 1002 {
			t.Errorf("HostIDs = %d, %d", uid, gid)
		}
		r, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		res, err := w.Run(ctx, &jail.Spec{Command: box.Command{Args: []string{"bash", "-c", "x"}, ExtraFiles: []*os.File{wr}}})
		wr.Close()
		if err != nil || res.ExitCode != 1 {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		// The worker's copy was closed once the run ended: EOF.
		if got, _ := io.ReadAll(r); string(got) != "state of wsa" {
			t.Errorf("extra file got %q", got)
		}
		if made[0].runs[0] != "bash -c x" {
			t.Errorf("runs %q", made[0].runs)
		}
		if err := w.Close(); err != nil || !made[0].isClosed() {
			t.Errorf("Close: %v, closed %v", err, made[0].isClosed())
		}
		if _, err := w.Run(ctx, &jail.Spec{Command: box.Command{Args: []string{"true"}}}); !errors.Is(err, ErrNoWorkspace) {
			t.Errorf("run on a closed workspace: %v, want ErrNoWorkspace", err)
		}
		if _, err := c.NewWorkspace(ctx, 0, false, &box.Limits{Memory: 64 << 20}); err != nil {
			t.Fatal(err)
		}
		leftOpen = made[1]
		if made[0].prestart != nil || leftOpen.prestart == nil || *leftOpen.prestart != (box.Limits{Memory: 64 << 20}) {
			t.Errorf("prestart limits crossed as %v and %v", made[0].prestart, leftOpen.prestart)
		}
	})
	t.Run("proxy", func(t *testing.T) {
		p := pairWith(t, fake{}, ws)
		c := &Client{cur: p}
		w, err := c.NewWorkspace(context.Background(), 0, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		ln := w.TakeProxyListener()
		if ln == nil {
			t.Fatal("no proxy listener came with the workspace")
		}
		defer ln.Close()
		if w.TakeProxyListener() != nil {
			t.Error("the proxy listener was given twice")
		}
		// The front end's copy accepts what is dialed at the worker's
		// address: the same socket.
		conn, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		in, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		in.Close()
	})
	// pairWith's cleanup ended Serve.
	if leftOpen == nil || !leftOpen.isClosed() {
		t.Error("a workspace the front end left open was not closed when Serve ended")
	}
}
