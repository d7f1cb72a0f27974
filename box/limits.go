package box

import (
	"time"
)

// Defaults for the fields of [Limits] and [Command] left zero. They are deliberately
// small: a caller who needs more asks for it, and an operator can cap what
// callers may ask for.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMemory    = 256 << 20 // bytes, no swap
	DefaultPids      = 256
	DefaultCPUs      = 1.0
	DefaultTmpfsSize = 64 << 20 // bytes, for each of the working directory and /tmp
	DefaultMaxOutput = 1 << 20  // bytes kept per stream
	// DefaultDir is the sandbox's working directory unless the jail
	// Manager's Config.WorkDir names another.
	DefaultDir = "/work"
)

// Upper bounds that no Limits may exceed, whatever an operator configures.
const (
	MaxTimeout = 24 * time.Hour
	minMemory  = 4 << 20 // below this the init process itself cannot start
	// maxPids is the kernel's ceiling for a pids limit (PID_MAX_LIMIT).
	maxPids = 1 << 22
	// maxCPUs is far above any host's cores, and far below where the CFS
	// quota (cores times a 100 ms period) would leave the kernel's range
	// or overflow.
	maxCPUs = 1 << 16
)

// Limits are the resources of one sandbox. They are fixed when the sandbox is
// created, so a pool can create sandboxes ahead of
// time. The zero value of each field means its Default*.
type Limits struct {
	// Memory is the cgroup memory limit in bytes, with swap disabled.
	// Tmpfs pages written in the working directory and /tmp count
	// against it too.
	Memory int64
	// Pids is the maximum number of processes and threads.
	Pids int64
	// CPUs is the CPU quota in cores (1.5 = one and a half cores).
	CPUs float64
	// TmpfsSize caps each of the working directory's and /tmp's tmpfs
	// mounts, in bytes.
	TmpfsSize int64
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	return l.Or(Limits{Memory: DefaultMemory, Pids: DefaultPids, CPUs: DefaultCPUs, TmpfsSize: DefaultTmpfsSize})
}

// Or returns l with every zero field set to def's.
func (l Limits) Or(def Limits) Limits {
	if l.Memory == 0 {
		l.Memory = def.Memory
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.TmpfsSize == 0 {
		l.TmpfsSize = def.TmpfsSize
	}
	return l
}

// Validate reports the first limit that is negative, too small to start a
// sandbox or beyond what the kernel takes. It treats zero as "default", so
// it accepts the zero Limits.
func (l Limits) Validate() error {
	switch {
	case l.Memory < 0 || (l.Memory > 0 && l.Memory < minMemory):
		return invalid("memory_bytes", "%d bytes: must be at least %d", l.Memory, minMemory)
	case l.Pids < 0 || (l.Pids > 0 && l.Pids < 2) || l.Pids > maxPids:
		return invalid("pids", "%d: must be between 2 and %d", l.Pids, maxPids)
	case l.CPUs != 0 && !(l.CPUs >= 0.01 && l.CPUs <= maxCPUs): // NaN fails both
		return invalid("cpus", "%g: must be between 0.01 and %d", l.CPUs, maxCPUs)
	case l.TmpfsSize < 0 || (l.TmpfsSize > 0 && l.TmpfsSize < 4096):
		return invalid("tmpfs_size_bytes", "%d bytes: must be at least 4096", l.TmpfsSize)
	}
	return nil
}

// Within reports the first limit of l (after defaults) that exceeds max.
// A zero field of max means no maximum for that limit.
func (l Limits) Within(max Limits) error {
	l = l.WithDefaults()
	switch {
	case max.Memory > 0 && l.Memory > max.Memory:
		return invalid("memory_bytes", "%d bytes exceeds the maximum of %d", l.Memory, max.Memory)
	case max.Pids > 0 && l.Pids > max.Pids:
		return invalid("pids", "%d exceeds the maximum of %d", l.Pids, max.Pids)
	case max.CPUs > 0 && l.CPUs > max.CPUs:
		return invalid("cpus", "%g exceeds the maximum of %g", l.CPUs, max.CPUs)
	case max.TmpfsSize > 0 && l.TmpfsSize > max.TmpfsSize:
		return invalid("tmpfs_size_bytes", "%d bytes exceeds the maximum of %d", l.TmpfsSize, max.TmpfsSize)
	}
	return nil
}
