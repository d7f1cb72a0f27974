package jail

import (
	"fmt"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// sandboxNOFILE is how many files each process of a sandbox may have open,
// unless jaild's own hard limit is lower.
const sandboxNOFILE = 4096

// sandboxRlimits are the resource limits every sandbox's processes start
// with: no core dumps, and sandboxNOFILE open files or jaild's own hard
// limit, whichever is lower. Raising a hard limit takes CAP_SYS_RESOURCE,
// which a container's bounding set may lack while its runtime sets a lower
// hard limit (1024 is common): asking for more would fail every sandbox's
// start ("error setting rlimit type 7"). clamped says the hard limit won.
func sandboxRlimits() (rl []configs.Rlimit, clamped bool) {
	nofile := uint64(sandboxNOFILE)
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err == nil && own.Max < nofile {
		nofile, clamped = own.Max, true
	}
	return []configs.Rlimit{
		{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
		{Type: unix.RLIMIT_NOFILE, Hard: nofile, Soft: nofile},
	}, clamped
}

// checkRlimits says what sandboxes get of the open-files limit.
func checkRlimits() Finding {
	rl, clamped := sandboxRlimits()
	f := Finding{Name: "rlimits", OK: true}
	if clamped {
		f.Detail = fmt.Sprintf("NOFILE clamped to %d (the hard limit jaild runs with, e.g. its container's; sandboxes get %d where it allows)", rl[1].Hard, sandboxNOFILE)
	} else {
		f.Detail = fmt.Sprintf("NOFILE %d, no core dumps", rl[1].Hard)
	}
	return f
}
