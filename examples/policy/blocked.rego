# Blocked patterns over the parsed shell string (or, in argv mode, the one
# command): a veto the router applies whatever the command packages allow,
# and its reasons are the caller's (jaild returns data.sandbox.main.reasons
# with a deny). It lives under sandbox.main so no command can be routed to
# it. Each reason names what matched.
package sandbox.main.blocked

commands := input.shell.commands if input.shell else := [input]

# The base names of the commands (what follows the last slash), each
# computed once: every rule on commands first looks up the names it is
# about here, so a string that names none of them costs a set lookup per
# rule.
bases := {regex.replace(c.command, `^.*/`, "") | some c in commands}

# rm -rf / (any spelling of the recursive flag, / or /*).
reasons contains "rm -rf /" if {
	"rm" in bases
	some c in commands
	base(c.command) == "rm"
	some f in c.args
	regex.match(`^-[a-zA-Z]*[rR]|^--recursive$`, f)
	some t in c.args
	t in {"/", "/*", "/."}
}

reasons contains "mkfs" if {
	some b in bases
	startswith(b, "mkfs")
}

reasons contains "dd if=/dev/zero" if {
	"dd" in bases
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

# Pipe to a shell: curl ... | sh, wget -qO- ... | sudo bash, bash <(curl ...),
# sh -c "$(curl ...)", curl ... | python3 -: a downloader and an
# interpreter that reads its program from stdin or a substitution, in one
# string. The parse lists commands, not pipes: a downloader anywhere with
# such an interpreter anywhere is refused.
reasons contains sprintf("pipe to a shell: %s | %s", [d, base(i.command)]) if {
	some d in bases & downloaders
	some i in interpreters_run
	reads_program_from_stdin(i)
}

downloaders := {"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lynx", "links"}

interpreters := {
	"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh", "fish", "rbash",
	"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "tclsh",
}

interpreter(name) if base(name) in interpreters

interpreter(name) if regex.match(`^python[0-9.]+$`, base(name))

# The interpreters a string runs: its commands, and what sudo or doas
# runs (sudo -E bash).
interpreters_run contains c if {
	some c in commands
	interpreter(c.command)
}

interpreters_run contains {"command": c.args[i], "args": array.slice(c.args, i + 1, count(c.args))} if {
	some c in commands
	base(c.command) in {"sudo", "doas"}
	some i, a in c.args
	interpreter(a)
}

# No operand (sh, bash -s, python3 -u), stdin by name (-, /dev/stdin), a
# file descriptor or process substitution (<(curl ...)), or a program
# that is a command substitution (sh -c "$(curl ...)").
reads_program_from_stdin(c) if count([a | some a in c.args; not startswith(a, "-")]) == 0

reads_program_from_stdin(c) if {
	some a in c.args
	a in {"-", "/dev/stdin"}
}

reads_program_from_stdin(c) if {
	some a in c.args
	regex.match(`^(/dev/fd/|/proc/self/fd/|<\()|\$\(`, a)
}

# Recursive chmod/chown/chgrp of / or of a top-level system directory:
# chmod -R 777 /, chown -R user /etc, chgrp --recursive g /usr/*.
reasons contains sprintf("%s -R of %s", [n, t]) if {
	some n in bases & {"chmod", "chown", "chgrp"}
	some c in commands
	base(c.command) == n
	some f in c.args
	regex.match(`^-[a-zA-Z]*R|^--recursive$`, f)
	some t in c.args
	system_dir(t)
}

system_dir(p) if regex.match(`^/+((bin|boot|dev|etc|home|lib|lib32|lib64|libx32|opt|proc|root|run|sbin|srv|sys|usr|var)/*)?[*.]?$`, p)

# Shell history and credentials: ~/.bash_history (and other shells' and
# REPLs' histories), ~/.ssh/..., ~/.aws/credentials, ~/.netrc,
# ~/.git-credentials, ~/.pgpass, ~/.docker/config.json, ~/.kube/config,
# ~/.gnupg, gh's hosts.yml, /etc/shadow, the host keys in /etc/ssh. Named
# anywhere in the string, so redirections (cat < ~/.netrc), which the
# parse does not list, count too; in argv mode, in an argument.
reasons contains sprintf("reads credentials or history: %s", [trim(m, ` "'<>;|&()=`)]) if {
	some w in words
	some i, p in secrets
	contains(w, needs[i])
	some m in regex.find_n(p, w, -1)
}

words := [input.shell.source] if input.shell else := input.args

secrets := [
	`(^|[\s"'<>;|&()=])([^\s"'<>;|&()=]*/)?\.((bash|zsh|sh|python|mysql|psql|node_repl|sqlite|rediscli)_history|history|lesshst|netrc|git-credentials|pgpass|ssh|gnupg|aws/credentials|aws/config|docker/config\.json|kube/config|config/gh/hosts\.yml)(/[^\s"'<>;|&()]*)?($|[\s"'<>;|&()])`,
	`(^|[\s"'<>;|&()=])(/etc/g?shadow-?|/etc/ssh/ssh_host_[A-Za-z0-9]+_key)($|[\s"'<>;|&()])`,
]

# A literal that every match of secrets[i] holds, looked for first.
needs := [".", "/etc/"]

base(p) := regex.replace(p, `^.*/`, "")
