package jail

// SetTeardownHook makes m's background teardowns call f with the sandbox's
// id before they destroy it (nil: no hook). Set it before any run.
func SetTeardownHook(m *Manager, f func(id string)) { m.teardowns.hook = f }
