package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jaild/jaild/box"
)

// The flags of a control message, its first byte: which descriptors follow
// the run's socket, in this order, or that it is a workspace operation.
const (
	hasStdin  = 1 << iota // a descriptor to read the command's stdin from
	hasStdout             // the write end of a pipe for live stdout
	hasStderr             // the same for stderr
	hasExtra              // the second byte counts the command's ExtraFiles, which follow
	// opWorkspace: the message carries only a socket, on which the front
	// end sends a wsRequest and the worker answers a wsAnswer.
	opWorkspace = 1 << 6
)

// maxExtra bounds a run's ExtraFiles (a session passes one).
const maxExtra = 8

// wsRequest is a workspace operation: "create" a workspace of Size bytes,
// or "close" the workspace ID.
type wsRequest struct {
	Op   string `json:"op"`
	Size int64  `json:"size,omitempty"`
	ID   string `json:"id,omitempty"`
	// Proxy asks for a workspace with a proxy listener in its network
	// namespace (jail.WithProxy): after the answer, the worker sends
	// egressMark carrying the listener, as on a run with egress.
	Proxy bool `json:"proxy,omitempty"`
	// Prestart, if set, makes the workspace keep a sandbox with these
	// limits started for its next run (jail.WithPrestart).
	Prestart *box.Limits `json:"prestart,omitempty"`
}

// wsAnswer is the worker's answer to a wsRequest: the workspace made (its
// id, host directory, size and the host uid and gid of its sandbox user),
// or the error.
type wsAnswer struct {
	ID   string     `json:"id,omitempty"`
	Dir  string     `json:"dir,omitempty"`
	Size int64      `json:"size,omitempty"`
	UID  int        `json:"uid,omitempty"`
	GID  int        `json:"gid,omitempty"`
	Err  *wireError `json:"err,omitempty"`
}

// maxFrame bounds a JSON frame. A spec's size is bounded by the front end
// (its request body limit), a result's header is small; the bound keeps a
// corrupt length from allocating without limit.
const maxFrame = 64 << 20

// ready is the worker's first message on the control connection.
type ready struct {
	Err *wireError `json:"err,omitempty"`
}

// wireSpec is a jail.Spec without its stdio.
type wireSpec struct {
	Limits    box.Limits    `json:"limits"`
	Args      []string      `json:"args"`
	Env       []string      `json:"env,omitempty"`
	Dir       string        `json:"dir,omitempty"`
	Timeout   time.Duration `json:"timeout"`
	MaxOutput int64         `json:"max_output"`
	// Workspace, if set, is the id of a workspace the worker holds (see
	// wsRequest): the run is on it.
	Workspace string `json:"workspace,omitempty"`
	// Egress asks for a sandbox whose only way out is a proxy listener
	// (jail.Egress): the worker passes the listener to the front end,
	// which serves the proxy (see egressMark).
	Egress bool `json:"egress,omitempty"`
}

// egressMark is the one byte, carrying the proxy listener by SCM_RIGHTS,
// that the worker sends on a run's socket before the answer when the run
// has egress. An answer frame never starts with it: its first byte is the
// top byte of a length below maxFrame, which is 0 to 3.
const egressMark = 'L'

// answer is the worker's reply to a run. The kept output follows it on the
// run's socket: StdoutLen bytes of stdout, then StderrLen of stderr.
type answer struct {
	Result    *box.Result `json:"result,omitempty"` // without Stdout and Stderr
	StdoutLen int64       `json:"stdout_len"`
	StderrLen int64       `json:"stderr_len"`
	Err       *wireError  `json:"err,omitempty"`
}

// wireError is an error with the identity callers test for: one of the
// sentinels below, or a *box.InvalidError.
type wireError struct {
	Msg    string `json:"msg"`
	Kind   string `json:"kind,omitempty"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// sentinels are the errors whose identity crosses the wire, by name.
var sentinels = []struct {
	kind string
	err  error
}{
	{"command_not_found", box.ErrCommandNotFound},
	{"not_executable", box.ErrNotExecutable},
	{"closed", box.ErrClosed},
	{"not_root", box.ErrNotRoot},
	{"unsupported", box.ErrUnsupported},
	{"rootfs", box.ErrRootfs},
	{"untrusted", box.ErrUntrusted},
	{"pids_budget", box.ErrPidsBudget},
	{"canceled", context.Canceled},
	{"no_workspace", ErrNoWorkspace},
	{"deadline", context.DeadlineExceeded},
}

func encodeError(err error) *wireError {
	if err == nil {
		return nil
	}
	we := &wireError{Msg: err.Error()}
	var ie *box.InvalidError
	if errors.As(err, &ie) {
		we.Kind, we.Field, we.Reason = "invalid", ie.Field, ie.Reason
		return we
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			we.Kind = s.kind
			break
		}
	}
	return we
}

// decode gives back an error with the message of the original and, for
// errors.Is and errors.As, its identity.
func (we *wireError) decode() error {
	if we == nil {
		return nil
	}
	var id error
	if we.Kind == "invalid" {
		id = &box.InvalidError{Field: we.Field, Reason: we.Reason}
	}
	for _, s := range sentinels {
		if s.kind == we.Kind {
			id = s.err
		}
	}
	switch {
	case id == nil:
		return errors.New(we.Msg)
	case id.Error() == we.Msg:
		return id
	}
	return &remoteError{msg: we.Msg, id: id}
}

// remoteError is an error of the worker that wrapped id.
type remoteError struct {
	msg string
	id  error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.id }

// writeFrame writes v as one frame: its JSON length, big-endian, then the
// JSON.
func writeFrame(w io.Writer, v any) error {
	buf, err := frame(v)
	if err == nil {
		_, err = w.Write(buf)
	}
	return err
}

// frame is v as one frame.
func frame(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(data) > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes: at most %d", len(data), maxFrame)
	}
	buf := make([]byte, 4, 4+len(data))
	binary.BigEndian.PutUint32(buf, uint32(len(data)))
	return append(buf, data...), nil
}

// readFrame reads one frame into v.
func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes: at most %d", size, maxFrame)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
