package jail

import "sync"

// DefaultTeardownBacklog is how many sandboxes a Manager tears down after
// their runs returned, when Config.TeardownBacklog is zero.
const DefaultTeardownBacklog = 4

// teardowns ends sandboxes after their answer. A run's result (exit status,
// output, the verdict's counters) is complete once the command has exited
// and its cgroup was read; destroying the container, its cgroup and state
// (a few milliseconds, more on cgroup v1's dozen hierarchies) need not delay
// the caller. So a finished sandbox is destroyed in the background, while
// fewer than the backlog are; beyond it the run destroys its sandbox before
// it returns, as it always did. A flood therefore cannot pile up sandboxes
// waiting to be destroyed: at most the backlog exist beyond the runs in
// progress, which the daemon's admission control bounds, and a run that
// finds the backlog full holds its admission until its own teardown is done.
//
// A sandbox being torn down keeps its slot record (and its place in
// Manager.live, which Close waits for) until it is gone, so a crash
// mid-teardown leaves it to the watchdog or the next sweep like any other.
type teardowns struct {
	slots chan struct{} // a token per background teardown in progress
	wg    sync.WaitGroup
	// hook, if set (by tests), runs in a background teardown before the
	// sandbox is destroyed.
	hook func(id string)
}

func newTeardowns(backlog int) *teardowns {
	if backlog == 0 {
		backlog = DefaultTeardownBacklog
	}
	return &teardowns{slots: make(chan struct{}, max(backlog, 0))}
}

// release destroys sb, in the background if the backlog has room; only a
// teardown done now can report an error.
func (m *Manager) release(sb *sandbox) error {
	t := m.teardowns
	select {
	case t.slots <- struct{}{}:
	default:
		return m.destroy(sb)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() { <-t.slots }()
		if t.hook != nil {
			t.hook(sb.id)
		}
		_ = m.destroy(sb)
	}()
	return nil
}

// destroy destroys sb and logs a failure, which the next sweep finishes.
func (m *Manager) destroy(sb *sandbox) error {
	err := sb.Destroy()
	if err != nil {
		m.log.Warn("destroying sandbox", "id", sb.id, "err", err)
	}
	return err
}

// WaitTeardowns waits until the sandboxes being destroyed in the background
// are gone.
func (m *Manager) WaitTeardowns() { m.teardowns.wg.Wait() }
