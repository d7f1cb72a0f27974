package sandbox.main.blocked_test

import data.sandbox.main.blocked

sh(cmds, fns) := {"shell": {"commands": cmds, "functions": fns}}

c(name, args) := {"command": name, "args": args}

test_rm_rf_root if {
	blocked.reasons["rm -rf /"] with input as sh([c("rm", ["-rf", "/"])], [])
	blocked.reasons["rm -rf /"] with input as sh([c("/bin/rm", ["-r", "-f", "/*"])], [])
	blocked.reasons["rm -rf /"] with input as sh([c("rm", ["--recursive", "/"])], [])
}

test_rm_elsewhere_not_blocked if {
	count(blocked.reasons) == 0 with input as sh([c("rm", ["-rf", "/work/tmp"])], [])
}

test_mkfs if {
	blocked.reasons.mkfs with input as sh([c("mkfs.ext4", ["/dev/sda1"])], [])
}

test_dd_zero if {
	blocked.reasons["dd if=/dev/zero"] with input as sh([c("dd", ["if=/dev/zero", "of=/dev/sda"])], [])
	not blocked.reasons["dd if=/dev/zero"] with input as sh([c("dd", ["if=a", "of=b"])], [])
}

test_fork_bomb if {
	blocked.reasons["fork bomb"] with input as sh([c(":", []), c(":", []), c(":", [])], [{"name": ":", "calls": [":", ":"]}])
	not blocked.reasons["fork bomb"] with input as sh([c("f", [])], [{"name": "f", "calls": ["date"]}])
}

test_router_vetoes_blocked if {
	not data.sandbox.main.allow with input as {
		"command": "sh", "path": "/usr/bin/dash", "args": [], "env": {},
		"shell": {"source": ":(){ :|:& };:", "dynamic": false,
			"commands": [
				{"command": ":", "path": "", "args": [], "via": []},
				{"command": ":", "path": "", "args": [], "via": []},
				{"command": ":", "path": "", "args": [], "via": []},
			],
			"functions": [{"name": ":", "calls": [":", ":"]}]},
	}
}
