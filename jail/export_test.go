package jail

// Test hooks for the external tests.

var NewProxyNetNS = newProxyNetNS

func EgressNetNS(m *Manager, id string) string { return egressNetNS(m.containers, id) }

func WorkspaceNetNS(w *Workspace) string { return w.netns }
