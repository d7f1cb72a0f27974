# Blocked patterns over the parsed shell string: a veto the router applies
# to shell mode, whatever the command packages allow. It lives under
# sandbox.main so no command can be routed to it.
package sandbox.main.blocked

commands := input.shell.commands if input.shell

commands := [input] if not input.shell

# rm -rf / (any spelling of the recursive flag, / or /*).
reasons contains "rm -rf /" if {
	some c in commands
	base(c.command) == "rm"
	some f in c.args
	regex.match(`^-[a-zA-Z]*[rR]|^--recursive$`, f)
	some t in c.args
	t in {"/", "/*", "/."}
}

reasons contains "mkfs" if {
	some c in commands
	startswith(base(c.command), "mkfs")
}

reasons contains "dd if=/dev/zero" if {
	some c in commands
	base(c.command) == "dd"
	some a in c.args
	a in {"if=/dev/zero", "if=/dev/urandom", "if=/dev/random"}
}

# A fork bomb is a function that calls itself: :(){ :|:& };:
reasons contains "fork bomb" if {
	some f in input.shell.functions
	f.name in f.calls
}

base(p) := parts[count(parts) - 1] if parts := split(p, "/")
