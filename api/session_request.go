package api

import (
	"time"

	"github.com/jaild/jaild/box"
)

// Values checks what does not depend on the operator's configuration, as
// Request.Spec does, and returns the session's idle timeout, workspace
// size and limits, zero where the request sets none. Errors are
// *box.InvalidError naming the field.
func (r *SessionRequest) Values() (ttl time.Duration, workspace int64, l box.Limits, err error) {
	if r.TTLSeconds != nil {
		if *r.TTLSeconds <= 0 || *r.TTLSeconds > int64(box.MaxTimeout/time.Second)*1000 {
			return 0, 0, l, invalid("ttl_seconds", "must be positive")
		}
		ttl = time.Duration(*r.TTLSeconds) * time.Second
	}
	if r.WorkspaceBytes != nil {
		if *r.WorkspaceBytes <= 0 {
			return 0, 0, l, invalid("workspace_bytes", "must be positive")
		}
		workspace = *r.WorkspaceBytes
	}
	sl := r.Limits
	if sl == nil {
		return ttl, workspace, l, nil
	}
	for _, f := range []struct {
		name string
		p    *int64
		dst  *int64
	}{
		{"memory_bytes", sl.MemoryBytes, &l.Memory},
		{"pids", sl.Pids, &l.Pids},
		{"tmpfs_size_bytes", sl.TmpfsSizeBytes, &l.TmpfsSize},
	} {
		if f.p != nil {
			if *f.p <= 0 {
				return 0, 0, l, invalid("limits."+f.name, "must be positive")
			}
			*f.dst = *f.p
		}
	}
	if sl.CPUs != nil {
		if !(*sl.CPUs > 0) {
			return 0, 0, l, invalid("limits.cpus", "must be positive")
		}
		l.CPUs = *sl.CPUs
	}
	return ttl, workspace, l, nil
}
