package jail

import (
	"fmt"
	"strings"

	"github.com/jaild/jaild/box"
)

// What every sandbox is the same in. The defaults of a Spec's fields left
// zero are package box's (box.DefaultMemory, ...).
const (
	// SandboxUID and SandboxGID are the ids the command runs as inside the
	// sandbox. Container root (uid 0) exists only to set the sandbox up.
	SandboxUID = 1000
	SandboxGID = 1000

	// Hostname is the UTS hostname every sandbox sees.
	Hostname = "jaild"

	// Path is the fixed PATH the command starts with unless Env sets one.
	Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// Spec is one run: a command in a fresh sandbox with the given limits, as
// [Manager.Run] takes it.
type Spec struct {
	Limits box.Limits
	// Workspace, if not nil, gives the sandbox the workspace's working
	// directory, network namespace and uid range instead of a fresh tmpfs and
	// a network namespace of its own with only loopback (see
	// [Workspace]); every other namespace, limit and filter is the
	// sandbox's own as always.
	Workspace *Workspace
	// Egress, if not nil, gives the sandbox a proxy endpoint on its
	// loopback that the caller serves, and no other way out (see
	// [Egress]). Not available on a workspace.
	Egress *Egress
	box.Command
}

// Validate checks both the limits and the command.
func (s *Spec) Validate() error {
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	if err := validateEgress(s); err != nil {
		return err
	}
	return s.Command.Validate()
}

func invalid(field, format string, args ...any) error {
	return &box.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
