package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/session"
)

// MaxJobWait caps the wait_ms of GET /sessions/{id}/jobs/{job}.
const MaxJobWait = 60 * time.Second

// killWait bounds how long DELETE on a job waits for it to end once killed.
const killWait = 30 * time.Second

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	list := api.JobList{Jobs: []api.Job{}}
	for _, st := range sess.Jobs() {
		list.Jobs = append(list.Jobs, *jobOf(st))
	}
	writeJSON(w, http.StatusOK, &list)
}

// getJob answers a job's state and its output from the requested offsets
// (stdout_offset, stderr_offset, or offset for both), after waiting up to
// wait_ms (at most MaxJobWait) for it to end, or with until=output for it
// to end or write past the offsets.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var off session.Offsets
	var wait int64
	for _, p := range []struct {
		name string
		dst  *int64
	}{
		{"offset", &off.Stdout}, {"stdout_offset", &off.Stdout}, {"stderr_offset", &off.Stderr}, {"wait_ms", &wait},
	} {
		v, given := q[p.name]
		if !given {
			continue
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 0 || len(v) > 1 {
			s.writeRunError(w, r, &box.InvalidError{Field: p.name, Reason: "must be one non-negative integer"}, false)
			return
		}
		*p.dst = n
		if p.name == "offset" {
			off.Stderr = n
		}
	}
	if q.Has("offset") && (q.Has("stdout_offset") || q.Has("stderr_offset")) {
		s.writeRunError(w, r, &box.InvalidError{Field: "offset", Reason: "give offset, or stdout_offset and stderr_offset, not both"}, false)
		return
	}
	var untilOutput bool
	switch v := q["until"]; {
	case len(v) == 0 || len(v) == 1 && v[0] == "end":
	case len(v) == 1 && v[0] == "output":
		untilOutput = true
	default:
		s.writeRunError(w, r, &box.InvalidError{Field: "until", Reason: `must be "end" (the default) or "output"`}, false)
		return
	}
	id := r.PathValue("job")
	if wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), min(time.Duration(wait)*time.Millisecond, MaxJobWait))
		var err error
		if untilOutput {
			err = sess.WaitOutput(ctx, id, off)
		} else {
			err = sess.Wait(ctx, id)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			s.writeSessionError(w, r, err)
			return
		}
	}
	st, err := sess.Job(id, off)
	if err != nil {
		s.writeSessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobOf(st))
}

// killJob kills a job and answers its state once it has ended (or after
// killWait), with all its kept output.
func (s *Server) killJob(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	id := r.PathValue("job")
	if err := sess.Kill(id); err != nil {
		s.writeSessionError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), killWait)
	_ = sess.Wait(ctx, id)
	cancel()
	st, err := sess.Job(id, session.Offsets{})
	if err != nil {
		s.writeSessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobOf(st))
}

// jobOf is the wire form of a job's status.
func jobOf(st *session.JobStatus) *api.Job {
	j := &api.Job{
		JobID: st.ID, Command: st.Command, State: "running", StartedAt: st.Started,
		Stdout: st.Stdout, Stderr: st.Stderr, StdoutOffset: st.Next.Stdout, StderrOffset: st.Next.Stderr,
	}
	if !st.Running {
		j.State = "exited"
		ended := st.Ended
		j.EndedAt = &ended
		if st.Result != nil {
			code := st.Result.ExitCode
			v := api.VerdictOf(st.Result)
			j.ExitCode, j.Verdict = &code, &v
		}
		if st.Err != nil {
			j.Error = st.Err.Error()
		}
	}
	return j
}

// startJob answers POST /run with run_in_background: it starts req as a
// background job of its session and answers 202 with the job's id.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, req run.Request) {
	id, err := s.opts.Runner.Start(r.Context(), req)
	if err == nil && id == "" {
		err = errNoResult
	}
	if err != nil {
		s.writeRunError(w, r, err, false)
		return
	}
	writeJSON(w, http.StatusAccepted, jobAccepted(req.SessionID, id))
}

// jobAccepted is the 202 answer of a background run.
func jobAccepted(sessionID, jobID string) *api.JobAccepted {
	return &api.JobAccepted{JobID: jobID, SessionID: sessionID,
		Status: "/sessions/" + sessionID + "/jobs/" + jobID}
}
