package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/client"
	"github.com/jaild/jaild/internal/command"
)

var cpCommand = &cli.Command{
	Name:      "cp",
	Usage:     command.CpUsage,
	ArgsUsage: "LOCAL SESSION:PATH | SESSION:PATH LOCAL",
	Description: `Copies between here and a session's workspace, over the daemon's files API.
PATH is relative to the workspace, or absolute below the sandboxes' working
directory: /work/..., or what the daemon's --sandbox-workdir names (such as
/workspace/...). LOCAL "-" is stdin or stdout (a file).

  jaild cp build.sh S:/work/          a file: into /work/build.sh, mode and time kept
  jaild cp build.sh S:bin/b.sh        a file: to that name (parents made)
  jaild cp ./src S:/work/src          a directory: its contents into /work/src
  jaild cp S:/work/out.txt .          a file: into ./out.txt
  jaild cp S:/work/dist ./dist        a directory: its contents into ./dist

Directories travel as tar archives: symlinks stay symlinks (never followed,
on either side), fifos, sockets and devices are skipped. Files keep their
mode and their modification time, to the nanosecond, both ways (as cp -p;
setuid and setgid bits are dropped). A file over an existing file replaces it.

Exit codes: 0, 1 if the daemon refused (no such session or file, workspace
full), 125 for a bad command line or token, 119 if the daemon cannot be
reached or a local file cannot be read or written.`,
	Flags:        withConnFlags(),
	Action:       cpAction,
	OnUsageError: command.OnUsageError,
}

// remotePath is SESSION:PATH, with PATH relative to the session's
// workspace once resolved (see resolve).
type remotePath struct {
	session, path string
	arg           string // as given, for errors
}

// parseRemote reads SESSION:PATH; ok is false for a local path (one with
// no colon, or a slash before it: ./a:b is local). An absolute PATH is
// left to resolve, which knows the session's working directory.
func parseRemote(arg string) (remotePath, bool, error) {
	id, p, ok := strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return remotePath{}, false, nil
	}
	return remotePath{session: id, path: p, arg: arg}, true, nil
}

// resolve makes an absolute r.path relative to the session's workspace:
// it must be the working directory the daemon reports for the session
// (/work from a daemon that reports none) or below it.
func (r *remotePath) resolve(ctx context.Context, cl *client.Client) error {
	if !strings.HasPrefix(r.path, "/") {
		return nil
	}
	s, err := cl.Session(ctx, r.session)
	if err != nil {
		return err
	}
	wd := s.WorkDir
	if wd == "" {
		wd = "/work"
	}
	switch p := path.Clean(r.path); {
	case p == wd:
		r.path = ""
	case strings.HasPrefix(p, wd+"/"):
		r.path = strings.TrimPrefix(r.path, wd+"/")
	default:
		return command.UsageError("%s: a session's files are under %s, its sandboxes' working directory", r.arg, wd)
	}
	return nil
}

func cpAction(c *cli.Context) error {
	if c.NArg() != 2 {
		return command.UsageError("usage: jaild cp LOCAL SESSION:PATH, or jaild cp SESSION:PATH LOCAL")
	}
	src, srcRemote, err := parseRemote(c.Args().Get(0))
	if err != nil {
		return err
	}
	dst, dstRemote, err := parseRemote(c.Args().Get(1))
	if err != nil {
		return err
	}
	if srcRemote == dstRemote {
		return command.UsageError("one of the two paths must be SESSION:PATH and the other local")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	remote := &src
	if dstRemote {
		remote = &dst
	}
	if err := remote.resolve(ctx, cl); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			return err
		}
		return callError(ctx, err)
	}
	if dstRemote {
		err = upload(ctx, cl, c.Args().Get(0), dst)
	} else {
		err = download(ctx, cl, src, c.Args().Get(1), c.App.Writer)
	}
	var le *localError
	if errors.As(err, &le) {
		return cli.Exit(le.Error(), api.ExitInternal)
	}
	if err != nil {
		return callError(ctx, err)
	}
	return nil
}

// localError is a failure on this side of a copy.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// errUploadEnded stops the archive's writer once the upload is over,
// whichever way it ended.
var errUploadEnded = errors.New("upload ended")

// upload copies the local file or directory src to dst.
func upload(ctx context.Context, cl *client.Client, src string, dst remotePath) error {
	if src == "-" {
		return cl.PutFile(ctx, dst.session, dst.path, os.Stdin, nil)
	}
	st, err := os.Stat(src)
	if err != nil {
		return &localError{err}
	}
	if st.IsDir() {
		// The archive is written as it is sent; the writer is joined
		// before returning.
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := writeLocalTar(src, pw)
			pw.CloseWithError(err)
			done <- err
		}()
		err := cl.PutFile(ctx, dst.session, dst.path, pr, &client.PutOptions{Tar: true})
		pr.CloseWithError(errUploadEnded)
		if terr := <-done; terr != nil && !errors.Is(terr, errUploadEnded) {
			// The archive could not be written: the daemon's
			// answer to the cut-off archive says less.
			return &localError{terr}
		}
		return err
	}
	if !st.Mode().IsRegular() {
		return &localError{fmt.Errorf("%s is not a regular file or directory", src)}
	}
	target := dst.path
	if target == "" || strings.HasSuffix(dst.path, "/") {
		target = path.Join(dst.path, filepath.Base(src))
	}
	err = putLocalFile(ctx, cl, src, dst.session, target, st)
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && !strings.HasSuffix(target, "/"+filepath.Base(src)) {
		// The name is a directory there: into it, as cp does.
		err = putLocalFile(ctx, cl, src, dst.session, path.Join(target, filepath.Base(src)), st)
	}
	return err
}

// putLocalFile sends the file src, with its mode and its modification time
// to the nanosecond (so that make sees the copy as old as its source).
func putLocalFile(ctx context.Context, cl *client.Client, src, session, target string, st fs.FileInfo) error {
	f, err := os.Open(src)
	if err != nil {
		return &localError{err}
	}
	defer f.Close()
	return cl.PutFile(ctx, session, target, f, &client.PutOptions{Mode: st.Mode().Perm(), ModTime: st.ModTime()})
}

// download copies src to the local path dst: a file to dst (or into it if
// it is a directory), a directory's contents into dst.
func download(ctx context.Context, cl *client.Client, src remotePath, dst string, stdout io.Writer) error {
	f, err := cl.OpenFile(ctx, src.session, src.path, true)
	if err != nil {
		return err
	}
	defer f.Body.Close()
	if f.Kind == "tar" {
		if dst == "-" {
			return &localError{fmt.Errorf("%s is a directory: it cannot be written to stdout", src.arg)}
		}
		if err := readLocalTar(f.Body, dst); err != nil {
			return &localError{err}
		}
		return nil
	}
	if dst == "-" {
		if _, err := io.Copy(stdout, f.Body); err != nil {
			return &localError{err}
		}
		return nil
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, path.Base("/"+src.path))
	}
	out, err := os.Create(dst)
	if err != nil {
		return &localError{err}
	}
	if _, err := io.Copy(out, f.Body); err != nil {
		out.Close()
		return &localError{fmt.Errorf("write %s: %w", dst, err)}
	}
	if err := out.Close(); err != nil {
		return &localError{err}
	}
	// The source's mode (an executable stays one) and its time to the
	// nanosecond, as cp -p keeps them.
	if f.Mode != 0 {
		if err := os.Chmod(dst, f.Mode); err != nil {
			return &localError{err}
		}
	}
	if !f.ModTime.IsZero() {
		if err := os.Chtimes(dst, f.ModTime, f.ModTime); err != nil {
			return &localError{err}
		}
	}
	return nil
}
