package sandbox.main_test

argv(cmd, path, args) := {"command": cmd, "path": path, "hash": "", "args": args, "env": {}}

shell(src, cmds) := {
	"command": "sh", "path": "/usr/bin/dash", "args": ["-c", src], "env": {},
	"shell": {"source": src, "commands": cmds, "dynamic": false, "functions": []},
}

cmd(name, path, args) := {"command": name, "path": path, "hash": "", "args": args, "via": []}

test_routes_to_the_command_package if {
	data.sandbox.main.allow with input as argv("date", "/usr/bin/date", [])
}

test_unknown_command_denied if {
	not data.sandbox.main.allow with input as argv("rm", "/usr/bin/rm", ["-rf", "/"])
}

test_main_is_not_a_command if {
	not data.sandbox.main.allow with input as argv("main", "/usr/bin/main", [])
}

test_symlinked_name_denied if {
	not data.sandbox.main.allow with input as argv("date", "/usr/bin/rm", [])
}

test_writable_path_denied if {
	not data.sandbox.main.allow with input as object.union(argv("date", "/work/bin/date", []), {"writable": true})
}

test_shell_writable_command_denied if {
	not data.sandbox.main.allow with input as shell("date", [object.union(cmd("date", "/usr/bin/date", []), {"writable": true})])
}

test_env_refused_unless_the_package_allows if {
	not data.sandbox.main.allow with input as object.union(argv("date", "/usr/bin/date", []), {"env": {"A": "1"}})
}

test_shell_every_command_allowed if {
	data.sandbox.main.allow with input as shell("date | echo ok", [
		cmd("date", "/usr/bin/date", []),
		cmd("echo", "/usr/bin/echo", ["ok"]),
	])
}

test_shell_one_command_denied if {
	not data.sandbox.main.allow with input as shell("echo ok; rm -rf /", [
		cmd("echo", "/usr/bin/echo", ["ok"]),
		cmd("rm", "/usr/bin/rm", ["-rf", "/"]),
	])
}

test_shell_dynamic_denied if {
	inp := shell("x=date; $x", [object.union(cmd("$x", "", []), {"dynamic": true})])
	not data.sandbox.main.allow with input as object.union(inp, {"shell": {"dynamic": true}})
}

test_shell_builtins if {
	data.sandbox.main.allow with input as shell("cd /tmp && date", [cmd("cd", "", ["/tmp"]), cmd("date", "/usr/bin/date", [])])
}

test_shell_empty_denied if {
	not data.sandbox.main.allow with input as shell("", [])
}

test_reasons_name_the_refused_command if {
	data.sandbox.main.reasons["rm: no package sandbox.rm allows it"] with input as argv("rm", "/usr/bin/rm", ["-rf", "/work"])
	data.sandbox.main.reasons[`date: sandbox.date does not allow the arguments ["-s", "x"]`] with input as argv("date", "/usr/bin/date", ["-s", "x"])
	data.sandbox.main.reasons["date: resolves to /usr/bin/rm, which is not a file named date"] with input as argv("date", "/usr/bin/rm", [])
	data.sandbox.main.reasons["date: /work/date can be changed by the sandbox before it runs"] with input as object.union(argv("date", "/work/date", []), {"writable": true})
	data.sandbox.main.reasons["env A: sandbox.date does not allow it (allow_env)"] with input as object.union(argv("date", "/usr/bin/date", []), {"env": {"A": "1"}})
	data.sandbox.main.reasons["rm: no package sandbox.rm allows it"] with input as shell("echo ok; rm -rf /", [
		cmd("echo", "/usr/bin/echo", ["ok"]),
		cmd("rm", "/usr/bin/rm", ["-rf", "/"]),
	])
	data.sandbox.main.reasons["rm -rf /"] with input as shell("rm -rf /", [cmd("rm", "/usr/bin/rm", ["-rf", "/"])])
	data.sandbox.main.reasons["not decidable before it runs: eval runs a command that is not in the source"] with input as object.union(
		shell("eval date", [cmd("eval", "", ["date"])]),
		{"shell": {"dynamic": true, "reasons": ["eval runs a command that is not in the source"]}},
	)
}

test_argv_blocked_too if {
	not data.sandbox.main.allow with input as argv("echo", "/usr/bin/echo", ["~/.ssh/id_rsa"])
	data.sandbox.main.reasons["reads credentials or history: ~/.ssh/id_rsa"] with input as argv("echo", "/usr/bin/echo", ["~/.ssh/id_rsa"])
}

test_no_reasons_when_allowed if {
	count(data.sandbox.main.reasons) == 0 with input as argv("date", "/usr/bin/date", [])
	count(data.sandbox.main.reasons) == 0 with input as shell("cd /tmp && date", [cmd("cd", "", ["/tmp"]), cmd("date", "/usr/bin/date", [])])
}
