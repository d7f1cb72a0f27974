# The router: data.sandbox.main.allow is jaild's question. A request is
# routed to the package named after its command (sandbox.curl for curl),
# whose allow decides; its allow_env must also hold if the caller forwards
# any env. In shell mode every command of the parsed string must be allowed
# that way, nothing in it may be dynamic, and no blocked pattern may match.
package sandbox.main

default allow := false

# argv mode: /run with "executable", /raw, MCP execute.
allow if {
	not input.shell
	command_allowed(input)
	env_allowed(input)
}

# shell mode: /run with "command", MCP bash.
allow if {
	input.shell
	not input.shell.dynamic
	count(input.shell.commands) > 0
	every c in input.shell.commands {
		shell_command_allowed(object.union(input, c))
	}
	env_allowed(input)
	count(data.sandbox.main.blocked.reasons) == 0
}

# The command's package decides, and the file that runs must bear the
# command's name (input.path has every symlink resolved): a symlink named
# date that leads to rm is not date. A package lists other names its file
# may have in binaries (python3 is python3.11). A command the sandbox can
# change before it runs (input.writable: in /work or /tmp, or found
# through them, as with PATH=/work/bin:...) is not the program its name
# says, whatever it is called.
command_allowed(c) if {
	not c.writable
	data.sandbox[c.command].allow with input as c
	named_as_command(c)
}

named_as_command(c) if file_name(c) == c.command

named_as_command(c) if data.sandbox[c.command].binaries[file_name(c)]

file_name(c) := parts[count(parts) - 1] if parts := split(c.path, "/")

# Builtins that change nothing outside the shell run without a package.
builtins := {"cd", "true", "false", ":", "pwd"}

shell_command_allowed(c) if command_allowed(c)

shell_command_allowed(c) if {
	builtins[c.command]
	count(c.via) == 0
}

env_allowed(c) if count(object.keys(c.env)) == 0

env_allowed(c) if data.sandbox[c.command].allow_env with input as c
