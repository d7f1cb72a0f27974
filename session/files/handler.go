package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/api"
)

// DefaultMaxUpload is the largest PUT body if Options.MaxUpload is zero.
const DefaultMaxUpload = 1 << 30

// The headers of a file's metadata (see api.HeaderFileMode).
const (
	ModeHeader  = api.HeaderFileMode
	MtimeHeader = api.HeaderFileMtime
)

// TarType is the media type of archives, in Content-Type (PUT) and Accept
// (GET of a directory).
const TarType = "application/x-tar"

// Options configure NewHandler.
type Options struct {
	// MaxUpload bounds a PUT body, a file's or an archive's, in bytes;
	// a larger one is answered 413 and what was written of it is
	// removed (a file) or kept up to the entry it stopped in (an
	// archive). Zero means DefaultMaxUpload. The workspace's quota
	// applies anyway: beyond it a write fails with 507.
	MaxUpload int64
	// MaxEntries bounds the entries of an archive (zero:
	// DefaultMaxEntries); beyond it, 413.
	MaxEntries int
	// MinRate (bytes per second) and Stall bound how slowly a client may
	// send or read a file or an archive: each 64 KiB must move within
	// Stall + 64 KiB/MinRate, or the transfer is cut (the connection
	// closed) and the session it held is free again. Zero means
	// DefaultMinRate, DefaultStall.
	MinRate int64
	Stall   time.Duration
	// LookupError writes the answer to a request whose lookup failed
	// (no such session, another owner's, not authenticated), in the
	// daemon's error shape. Nil answers it as the handler answers its
	// own errors: 404 if err wraps ErrNotFound, else 500.
	LookupError func(w http.ResponseWriter, r *http.Request, err error)
	// Charge, if set, starts the process that writes uploaded data into
	// workspaces (see [Charger]); nil writes from the daemon itself,
	// whose memory cgroup the pages are then charged to.
	Charge Charger
	// Logger receives the errors answered with 500; nil discards them.
	Logger *slog.Logger
}

// Handler serves the files of sessions' workspaces (see api/session.go):
//
//	GET    .../files/{path...}  a file's bytes (Range and If-Modified-Since
//	                            work); a directory's api.FileList, or its tar
//	                            with Accept: application/x-tar
//	PUT    .../files/{path...}  the body becomes the file (optional ?mode=0755),
//	                            or, with Content-Type: application/x-tar, is
//	                            unpacked into the directory -> 204
//	DELETE .../files/{path...}  the file, symlink or directory tree -> 204
//
// {path} is the request's path value "path", relative to the workspace,
// the sandboxes' working directory (empty: the workspace itself); answers
// name paths as the sandbox sees them (Root.WorkDir, /work by default).
type Handler struct {
	lookup func(*http.Request) (Root, error)
	o      Options
	log    *slog.Logger
}

// NewHandler returns the handler of the files endpoints. lookup finds the
// workspace a request names (from its {id} and its caller) and is called
// on every request before anything is read from the workspace; the Root's
// Done is called when the request is over (a lookup that fails must hold
// nothing).
func NewHandler(lookup func(r *http.Request) (Root, error), o Options) *Handler {
	if o.MaxUpload <= 0 {
		o.MaxUpload = DefaultMaxUpload
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MinRate <= 0 {
		o.MinRate = DefaultMinRate
	}
	if o.Stall <= 0 {
		o.Stall = DefaultStall
	}
	h := &Handler{lookup: lookup, o: o, log: o.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	root, err := h.lookup(r)
	if err != nil {
		if h.o.LookupError != nil {
			h.o.LookupError(w, r, err)
		} else {
			h.fail(w, r, err)
		}
		return
	}
	if root.Done != nil {
		defer root.Done()
	}
	// Deadlines that move with the transfer's progress, and a context
	// that ends when the request's does or when the session's removal
	// begins: that removal waits for this request, so the request cuts its
	// transfer rather than wait on its client.
	pace := newPacer(w, &h.o)
	ctx, cancel := context.WithCancelCause(r.Context())
	var watch sync.WaitGroup
	if root.Closing != nil {
		watch.Add(1)
		go func() {
			defer watch.Done()
			select {
			case <-root.Closing:
				cancel(errCut)
			case <-ctx.Done():
			}
		}()
	}
	stopCut := pace.cutOn(ctx)
	defer func() {
		cut := !stopCut()
		cancel(nil)
		watch.Wait()
		if !cut {
			pace.finish()
		}
	}()
	r = r.WithContext(ctx)
	w = pacedResponse{w, pace}
	p := r.PathValue("path")
	if _, err := Split(p); err != nil {
		h.fail(w, r, err)
		return
	}
	fsys, err := Open(root)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer fsys.Close()
	if h.o.Charge != nil {
		fsys.ChargeTo(h.o.Charge)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.get(w, r, fsys, p)
	case http.MethodPut:
		h.put(w, r, fsys, p, pace)
	case http.MethodDelete:
		if err := fsys.Remove(r.Context(), p); err != nil {
			h.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, api.ErrorResponse{Error: r.Method + " is not allowed on files", Code: api.CodeInvalid})
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, fsys *FS, p string) {
	file, err := fsys.Open(p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	max := fsys.root.Size
	if !st.IsDir() {
		if max > 0 && st.Size() > max {
			h.fail(w, r, &os.PathError{Op: "read", Path: file.Name(), Err: fmt.Errorf("%w: %d bytes apparent, the workspace holds %d", ErrSparse, st.Size(), max)})
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(ModeHeader, fmt.Sprintf("%04o", modeBits(st.Mode())))
		w.Header().Set(MtimeHeader, st.ModTime().UTC().Format(time.RFC3339Nano))
		// ServeContent sends Content-Length, and serves ranges.
		http.ServeContent(w, r, "", st.ModTime(), file)
		return
	}
	if accepts(r, TarType) {
		if max > 0 {
			// Refused before anything is sent; WriteTar's own bound
			// covers files that grow meanwhile.
			n, err := TarSize(r.Context(), file)
			if err == nil && n > max {
				err = &os.PathError{Op: "tar", Path: file.Name(), Err: fmt.Errorf("%w: its files hold %d bytes apparent, the workspace %d", ErrSparse, n, max)}
			}
			if err != nil {
				h.fail(w, r, err)
				return
			}
		}
		w.Header().Set("Content-Type", TarType)
		if r.Method == http.MethodHead {
			return
		}
		if err := WriteTar(r.Context(), file, w, max); err != nil {
			// The status is sent: cut the stream, so that the
			// client reads a truncated archive, not a short one.
			h.log.Warn("files: tar out failed", "path", file.Name(), "err", err)
			panic(http.ErrAbortHandler)
		}
		return
	}
	list, err := List(file)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body, _ := json.Marshal(list)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(body, '\n'))
	}
}

func (h *Handler) put(w http.ResponseWriter, r *http.Request, fsys *FS, p string, pace *pacer) {
	if r.ContentLength > h.o.MaxUpload {
		h.fail(w, r, &http.MaxBytesError{Limit: h.o.MaxUpload})
		return
	}
	body := http.MaxBytesReader(w, pacedReader{r.Body, pace}, h.o.MaxUpload)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	if mt == TarType {
		_, err = fsys.Untar(r.Context(), p, body, h.o.MaxEntries)
	} else {
		var mode fs.FileMode
		if s := r.URL.Query().Get("mode"); s != "" {
			m, perr := strconv.ParseUint(s, 8, 32)
			if perr != nil || m > 0o1777 {
				writeError(w, http.StatusBadRequest, api.ErrorResponse{Error: "mode " + strconv.Quote(s) + ": want octal permission bits such as 0644", Code: api.CodeInvalid, Field: "mode"})
				return
			}
			mode = fs.FileMode(m & 0o777)
			if m&0o1000 != 0 {
				mode |= fs.ModeSticky
			}
		}
		var mtime time.Time
		if v := r.Header.Get(MtimeHeader); v != "" {
			t, perr := time.Parse(time.RFC3339Nano, v)
			if perr != nil {
				writeError(w, http.StatusBadRequest, api.ErrorResponse{Error: MtimeHeader + " " + strconv.Quote(v) + ": want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z", Code: api.CodeInvalid, Field: MtimeHeader})
				return
			}
			mtime = t
		}
		_, err = fsys.WriteStamped(r.Context(), p, body, mode, mtime)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// modeBits are a file's permission bits and sticky bit, as chmod takes them.
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// accepts reports whether r's Accept header names media type mt.
func accepts(r *http.Request, mt string) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == mt {
			return true
		}
	}
	return false
}

// fail answers err with its status and a one-line message.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, field := Status(err)
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if status == http.StatusInternalServerError {
		h.log.Error("files: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, api.ErrorResponse{Error: msg, Code: code, Field: field})
}

// Status is the HTTP status, error code (api.Code*) and request field of
// an error of this package.
func Status(err error) (status int, code, field string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe), errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge, "body"
	case errors.Is(err, ErrNoSpace):
		return http.StatusInsufficientStorage, api.CodeNoSpace, ""
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, api.CodeFileNotFound, ""
	case errors.Is(err, ErrIsDir), errors.Is(err, ErrNotDir), errors.Is(err, ErrExists),
		errors.Is(err, ErrNotEmpty), errors.Is(err, ErrNotRegular), errors.Is(err, ErrTooDeep),
		errors.Is(err, ErrSparse):
		return http.StatusConflict, api.CodeConflict, ""
	case errors.Is(err, ErrBadPath):
		return http.StatusBadRequest, api.CodeInvalid, "path"
	case errors.Is(err, ErrBadTar), errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, api.CodeInvalid, "body"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, api.CodeBodyTimeout, "body"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, api.CodeCanceled, ""
	}
	return http.StatusInternalServerError, api.CodeInternal, ""
}

func writeError(w http.ResponseWriter, status int, e api.ErrorResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}
