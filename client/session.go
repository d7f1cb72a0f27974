package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jaild/jaild/api"
)

// The calls of sessions, jobs and files (api/session.go). Each returns an
// *APIError for an error answer, as Run does.

// CreateSession calls POST /sessions; req may be nil.
func (c *Client) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.Session, error) {
	if req == nil {
		req = &api.SessionRequest{}
	}
	var s api.Session
	return &s, c.call(ctx, http.MethodPost, "/sessions", req, &s)
}

// Sessions calls GET /sessions: the caller's own sessions.
func (c *Client) Sessions(ctx context.Context) ([]api.Session, error) {
	var l api.SessionList
	if err := c.call(ctx, http.MethodGet, "/sessions", nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Session calls GET /sessions/{id}.
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	var s api.Session
	return &s, c.call(ctx, http.MethodGet, sessionPath(id), nil, &s)
}

// PatchSession calls PATCH /sessions/{id}.
func (c *Client) PatchSession(ctx context.Context, id string, patch *api.SessionPatch) (*api.Session, error) {
	var s api.Session
	return &s, c.call(ctx, http.MethodPatch, sessionPath(id), patch, &s)
}

// DeleteSession calls DELETE /sessions/{id}, which kills its jobs and
// removes its workspace.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, sessionPath(id), nil, nil)
}

// Start calls POST /run with run_in_background set: the command runs as a
// job of req.SessionID, which Job reads.
func (c *Client) Start(ctx context.Context, req *api.Request) (*api.JobAccepted, error) {
	r := *req
	r.RunInBackground = true
	var a api.JobAccepted
	return &a, c.call(ctx, http.MethodPost, "/run", &r, &a)
}

// Jobs calls GET /sessions/{id}/jobs (without their output).
func (c *Client) Jobs(ctx context.Context, id string) ([]api.Job, error) {
	var l api.JobList
	if err := c.call(ctx, http.MethodGet, sessionPath(id)+"/jobs", nil, &l); err != nil {
		return nil, err
	}
	return l.Jobs, nil
}

// JobQuery says which output Job returns.
type JobQuery struct {
	// StdoutOffset and StderrOffset are where the output returned
	// starts: 0, or the offsets of the previous answer.
	StdoutOffset, StderrOffset int64
	// Wait, if positive, lets the daemon wait up to that long for the
	// job's end before it answers, or with UntilOutput for the end or
	// output past the offsets, whichever comes first.
	Wait        time.Duration
	UntilOutput bool
}

// Job calls GET /sessions/{id}/jobs/{job}.
func (c *Client) Job(ctx context.Context, id, job string, q JobQuery) (*api.Job, error) {
	v := url.Values{}
	v.Set("stdout_offset", strconv.FormatInt(q.StdoutOffset, 10))
	v.Set("stderr_offset", strconv.FormatInt(q.StderrOffset, 10))
	if q.Wait > 0 {
		v.Set("wait_ms", strconv.FormatInt(q.Wait.Milliseconds(), 10))
		if q.UntilOutput {
			v.Set("until", "output")
		}
	}
	var j api.Job
	return &j, c.call(ctx, http.MethodGet, jobPath(id, job)+"?"+v.Encode(), nil, &j)
}

// KillJob calls DELETE /sessions/{id}/jobs/{job} and returns the job once
// it has ended.
func (c *Client) KillJob(ctx context.Context, id, job string) (*api.Job, error) {
	var j api.Job
	return &j, c.call(ctx, http.MethodDelete, jobPath(id, job), nil, &j)
}

// TarType is the media type of the archives of PutFile and OpenFile.
const TarType = "application/x-tar"

// PutOptions say how PutFile sends its body.
type PutOptions struct {
	// Tar sends the body as a tar archive, which the daemon unpacks
	// into the directory at the path (created if missing).
	Tar bool
	// Mode is the permission bits of a file (not of an archive); zero
	// means the daemon's default, 0644.
	Mode fs.FileMode
	// ModTime is a file's modification time, kept to the nanosecond;
	// zero means the time of the write. (An archive's entries carry
	// their own.)
	ModTime time.Time
}

// PutFile calls PUT /sessions/{id}/files/{path}: body becomes the file at
// path (relative to /work; missing directories are made), or with o.Tar is
// unpacked into the directory at path. o may be nil.
func (c *Client) PutFile(ctx context.Context, id, path string, body io.Reader, o *PutOptions) error {
	if o == nil {
		o = &PutOptions{}
	}
	p := filePath(id, path)
	ctype := "application/octet-stream"
	if o.Tar {
		ctype = TarType
	} else if o.Mode != 0 {
		p += "?mode=" + strconv.FormatUint(uint64(o.Mode.Perm()), 8)
	}
	var h http.Header
	if !o.Tar && !o.ModTime.IsZero() {
		h = http.Header{}
		h.Set(api.HeaderFileMtime, o.ModTime.UTC().Format(time.RFC3339Nano))
	}
	resp, err := c.do(ctx, http.MethodPut, p, body, ctype, h)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// File is an answer of OpenFile: a file's bytes, or a directory's tar or
// listing. The caller closes Body.
type File struct {
	Body io.ReadCloser
	// Kind is "file" (Body is its bytes), "tar" (a directory's archive)
	// or "list" (a directory's api.FileList, as JSON).
	Kind string
	// Size is the file's size, or -1 if unknown.
	Size int64
	// Mode and ModTime are a file's permission bits and modification
	// time (to the nanosecond), if the daemon sent them; zero otherwise.
	Mode    fs.FileMode
	ModTime time.Time
}

// OpenFile calls GET /sessions/{id}/files/{path}: a file comes as its
// bytes whatever tar says; a directory as a tar archive if tar is true,
// else as its listing.
func (c *Client) OpenFile(ctx context.Context, id, path string, tar bool) (*File, error) {
	h := http.Header{}
	if tar {
		h.Set("Accept", TarType)
	} else {
		h.Set("Accept", "application/json, application/octet-stream")
	}
	resp, err := c.do(ctx, http.MethodGet, filePath(id, path), nil, "", h)
	if err != nil {
		return nil, err
	}
	f := &File{Body: resp.Body, Kind: "file", Size: resp.ContentLength}
	if m, err := strconv.ParseUint(resp.Header.Get(api.HeaderFileMode), 8, 32); err == nil {
		f.Mode = fs.FileMode(m).Perm()
		if m&0o1000 != 0 {
			f.Mode |= fs.ModeSticky
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, resp.Header.Get(api.HeaderFileMtime)); err == nil {
		f.ModTime = t
	}
	switch mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt {
	case TarType:
		f.Kind = "tar"
	case "application/json":
		f.Kind = "list"
	}
	return f, nil
}

// GetFile writes what OpenFile answers to w and returns its Kind.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer, tar bool) (string, error) {
	f, err := c.OpenFile(ctx, id, path, tar)
	if err != nil {
		return "", err
	}
	defer f.Body.Close()
	if _, err := io.Copy(w, f.Body); err != nil {
		return f.Kind, fmt.Errorf("client: read %s: %w", path, err)
	}
	return f.Kind, nil
}

// ListFiles lists the directory at path.
func (c *Client) ListFiles(ctx context.Context, id, path string) (*api.FileList, error) {
	f, err := c.OpenFile(ctx, id, path, false)
	if err != nil {
		return nil, err
	}
	defer f.Body.Close()
	if f.Kind != "list" {
		return nil, fmt.Errorf("client: %s (in the session's workspace) is not a directory", strings.TrimPrefix(path, "/"))
	}
	var l api.FileList
	if err := json.NewDecoder(f.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("client: decode listing: %w", err)
	}
	return &l, nil
}

// DeleteFile calls DELETE /sessions/{id}/files/{path}: a file, a symlink
// or a whole directory.
func (c *Client) DeleteFile(ctx context.Context, id, path string) error {
	return c.call(ctx, http.MethodDelete, filePath(id, path), nil, nil)
}

// call sends in (if not nil) as JSON and decodes the answer into out (if
// not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encode request: %w", err)
		}
		body, ctype = bytes.NewReader(data), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ctype, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decode %s %s answer: %w", method, path, err)
	}
	return nil
}

func sessionPath(id string) string { return "/sessions/" + url.PathEscape(id) }

func jobPath(id, job string) string { return sessionPath(id) + "/jobs/" + url.PathEscape(job) }

// filePath escapes each component of a path relative to /work.
func filePath(id, path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return sessionPath(id) + "/files/" + strings.Join(parts, "/")
}
