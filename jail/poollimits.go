package jail

import (
	"fmt"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/cgroup"
)

// setLimits gives a started sandbox whose command has not been released
// other memory, pids and CPU limits, in its cgroup, so that a pooled
// sandbox can serve a run that asks for them. The tmpfs size, a mount
// option, cannot change. On failure the sandbox must not be used: its
// limits may be half set.
func (s *sandbox) setLimits(l box.Limits) error {
	if h := s.m.limitsHook; h != nil {
		if err := h(); err != nil {
			return fmt.Errorf("set the limits of sandbox %s: %w", s.id, err)
		}
	}
	cfg := s.c.Config()
	cg := *cfg.Cgroups
	res := *cg.Resources
	pids := l.Pids
	res.Memory, res.MemorySwap = l.Memory, l.Memory // no swap
	res.PidsLimit = &pids
	res.CpuQuota, res.CpuPeriod = cgroup.CPUQuota(l.CPUs)
	cg.Resources = &res
	cfg.Cgroups = &cg
	if err := s.c.Set(cfg); err != nil {
		return fmt.Errorf("set the limits of sandbox %s: %w", s.id, err)
	}
	s.limits = l
	return nil
}
