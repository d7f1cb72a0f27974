# The router: data.sandbox.main.allow is jaild's question. A request is
# routed to the package named after its command (sandbox.curl for curl),
# whose allow decides; its allow_env must also hold if the caller forwards
# any env. In shell mode every command of the parsed string must be allowed
# that way, nothing in it may be dynamic; in either, no blocked pattern may
# match. reasons says why a request is denied, for the caller.
package sandbox.main

default allow := false

# argv mode: /run with "executable", /raw, MCP execute.
allow if {
	not input.shell
	command_allowed(input)
	env_allowed
	count(data.sandbox.main.blocked.reasons) == 0
}

# shell mode: /run with "command", MCP bash.
allow if {
	input.shell
	not input.shell.dynamic
	count(input.shell.commands) > 0
	every c in input.shell.commands {
		shell_command_allowed(c)
	}
	env_allowed
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

file_name(c) := regex.replace(c.path, `^.*/`, "")

# Builtins that change nothing outside the shell run without a package.
builtins := {"cd", "true", "false", ":", "pwd"}

shell_command_allowed(c) if {
	builtins[c.command]
	count(c.via) == 0
}

# A command's package sees the request with the command's fields over it
# (input.args are the command's, input.env the request's).
shell_command_allowed(c) if command_allowed(object.union(input, c))

env_allowed if input.env == {}

env_allowed if data.sandbox[input.command].allow_env

# Why a request is denied. jaild asks this only after a deny, and returns
# it with the denial (the 403 body, /raw's error event, the MCP tool error,
# the decision log); it never decides.
reasons contains r if some r in data.sandbox.main.blocked.reasons

reasons contains refusal(input) if {
	not input.shell
	not command_allowed(input)
}

reasons contains refusal(object.union(input, c)) if {
	some c in input.shell.commands
	not shell_command_allowed(c)
}

reasons contains sprintf("not decidable before it runs: %s", [r]) if {
	input.shell.dynamic
	some r in input.shell.reasons
}

reasons contains "the shell string runs no command" if count(input.shell.commands) == 0

reasons contains sprintf("env %s: sandbox.%s does not allow it (allow_env)", [concat(",", sort(object.keys(input.env))), input.command]) if {
	not env_allowed
}

refusal(c) := sprintf("%s: %s can be changed by the sandbox before it runs", [c.command, c.path]) if {
	c.writable
} else := sprintf("%s: not a program in the sandbox, and not an allowed builtin", [c.command]) if {
	c.path == ""
} else := sprintf("%s: no package sandbox.%s allows it", [c.command, c.command]) if {
	not has_package(c)
} else := sprintf("%s: resolves to %s, which is not a file named %s", [c.command, c.path, c.command]) if {
	not named_as_command(c)
} else := sprintf("%s: sandbox.%s does not allow the arguments %v", [c.command, c.command, c.args])

# A command package has an allow (false by default); its tests do not.
has_package(c) if {
	_ := data.sandbox[c.command].allow with input as c
}
