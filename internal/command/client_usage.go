package command

// The one-line usages of the session client commands, shared by their
// definitions in jaild-server and jaild's stand-ins for them.
const (
	SessionUsage = "create, list and remove sessions on a jaild daemon (a working directory, /work by default, kept across calls)"
	JobsUsage    = "list a session's background jobs, or print one's output"
	CpUsage      = "copy files or directories between here and a session's workspace (its /work)"
)
