package run

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
)

// AuditOptions configure [Audit].
type AuditOptions struct {
	// LogCommand puts the full argv in each record. Off by default: the
	// SHA-256 of the argv is always there, and commands may carry secrets.
	LogCommand bool
	// Logger gets write errors of the audit log; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// AuditLog writes one [api.AuditRecord] per JSON line to a writer. Writes are
// serialized, each record in a single Write, so the writer may be a file
// shared by several writers in O_APPEND mode. A failing writer does not fail
// runs: the error is logged.
type AuditLog struct {
	o  AuditOptions
	mu sync.Mutex // serializes writes to w
	w  io.Writer
}

// NewAuditLog returns an AuditLog writing to w.
func NewAuditLog(w io.Writer, o AuditOptions) *AuditLog {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = discard
	}
	return &AuditLog{w: w, o: o}
}

// Audit returns a Runner that writes a record to l for every run of r,
// refused ones included, once the run has ended. It never writes the
// command's output.
func Audit(r Runner, l *AuditLog) Runner {
	return &auditor{next: r, log: l}
}

type auditor struct {
	next Runner
	log  *AuditLog
}

func (a *auditor) Run(ctx context.Context, req Request) (*box.Result, error) {
	start := a.log.o.Now()
	req, admitted := a.timeAdmission(req)
	res, err := a.next.Run(ctx, req)
	a.write(a.log.record(req, res, err), start, *admitted)
	return res, err
}

// Start writes a record with verdict "started" and the job's id once the
// job runs, or the refusal.
func (a *auditor) Start(ctx context.Context, req Request) (string, error) {
	start := a.log.o.Now()
	req, admitted := a.timeAdmission(req)
	id, err := a.next.Start(ctx, req)
	rec := a.log.record(req, nil, err)
	if err == nil {
		rec.Verdict, rec.JobID = api.VerdictStarted, id
	}
	a.write(rec, start, *admitted)
	return id, err
}

// timeAdmission returns req with an OnAdmit that notes when the run was
// admitted, in the time it returns, before it calls the caller's OnAdmit.
// Admission calls OnAdmit on the goroutine that called the auditor, before
// the run returns to it.
func (a *auditor) timeAdmission(req Request) (Request, *time.Time) {
	admitted := new(time.Time)
	onAdmit := req.OnAdmit
	req.OnAdmit = func() {
		*admitted = a.log.o.Now()
		if onAdmit != nil {
			onAdmit()
		}
	}
	return req, admitted
}

// write writes rec, of a request that arrived at start and was admitted
// at admitted (zero: never).
func (a *auditor) write(rec *api.AuditRecord, start, admitted time.Time) {
	rec.Time = start
	if !admitted.IsZero() {
		rec.WaitMS = admitted.Sub(start).Milliseconds()
	}
	a.log.write(rec)
}

// refused writes the record of a run refused before it reached the
// auditor (by the operator's maxima).
func (l *AuditLog) refused(req Request, err error) {
	if l == nil {
		return
	}
	rec := l.record(req, nil, err)
	rec.Time = l.o.Now()
	l.write(rec)
}

// Rejected writes the record of an HTTP request refused before it became a
// run: reason is its requests_rejected_total reason; caller and requestID
// as in [Request].
func (l *AuditLog) Rejected(caller, requestID, reason string, status int, msg string) {
	if l == nil {
		return
	}
	l.write(&api.AuditRecord{
		Time:      l.o.Now(),
		RequestID: requestID,
		Caller:    caller,
		Verdict:   api.VerdictRejected,
		Reason:    reason,
		Status:    status,
		Error:     msg,
	})
}

func (l *AuditLog) write(rec *api.AuditRecord) { l.writeLine(rec) }

// writeLine writes one record of any kind as a JSON line.
func (l *AuditLog) writeLine(rec any) {
	if l == nil {
		return
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(rec); err != nil {
		l.o.Logger.Error("audit: encode record", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(buf.Bytes()); err != nil {
		l.o.Logger.Error("audit: write record", "err", err)
	}
}

func (l *AuditLog) record(req Request, res *box.Result, err error) *api.AuditRecord {
	spec := req.Spec
	rec := auditRecordOf(req, res, err, l.o.LogCommand)
	// The size of in-memory stdin (what HTTP requests carry) is known;
	// other readers are left alone rather than wrapped, so that the jail
	// can still hand an *os.File over directly.
	if s, ok := spec.Stdin.(interface{ Size() int64 }); ok && s.Size() > 0 {
		rec.StdinBytes = s.Size()
	}
	return rec
}

func auditRecordOf(req Request, res *box.Result, err error, logCommand bool) *api.AuditRecord {
	spec := req.Spec
	rec := &api.AuditRecord{
		RequestID:     req.RequestID,
		Caller:        req.Caller,
		CommandSHA256: CommandHash(spec.Args),
		Cwd:           spec.Dir,
		Description:   req.Description,
		Limits: api.AuditLimits{
			MemoryBytes:    spec.Limits.Memory,
			Pids:           spec.Limits.Pids,
			CPUs:           spec.Limits.CPUs,
			TmpfsSizeBytes: spec.Limits.TmpfsSize,
			TimeoutMS:      spec.Timeout.Milliseconds(),
			MaxOutputBytes: spec.MaxOutput,
		},
		Verdict:   verdict(res, err),
		SessionID: req.SessionID,
	}
	if logCommand {
		rec.Command = spec.Args
	}
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		rec.EnvKeys = append(rec.EnvKeys, k)
	}
	if err != nil {
		rec.Error = err.Error()
	}
	if res != nil {
		code := res.ExitCode
		rec.ExitCode = &code
		rec.SandboxID = res.ID
		rec.Signal = res.Signal
		rec.Usage = api.UsageOf(res)
		if res.Limits != (box.Limits{}) {
			// What the jail really applied, should it differ.
			rec.Limits.MemoryBytes = res.Limits.Memory
			rec.Limits.Pids = res.Limits.Pids
			rec.Limits.CPUs = res.Limits.CPUs
			rec.Limits.TmpfsSizeBytes = res.Limits.TmpfsSize
		}
	}
	return rec
}

// verdict is the verdict of a run that ended in res and err.
func verdict(res *box.Result, err error) string {
	return api.RunOutcome(res, err).Verdict
}

// CommandHash is the hex SHA-256 of args joined by NUL bytes: NUL cannot
// occur inside an argument, so different argvs never hash the same input.
func CommandHash(args []string) string {
	h := sha256.New()
	for i, a := range args {
		if i > 0 {
			h.Write([]byte{0})
		}
		io.WriteString(h, a)
	}
	return hex.EncodeToString(h.Sum(nil))
}

var discard = slog.New(slog.DiscardHandler)

// OpenAuditLog opens path for appending audit records ("-" is stderr),
// creating it mode 0600: the log names callers and may hold commands.
func OpenAuditLog(path string, stderr io.Writer) (io.WriteCloser, error) {
	if path == "-" {
		return nopCloser{stderr}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return f, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
