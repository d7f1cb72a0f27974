package sandbox.network.network_test

import data.sandbox.network

conn(host, port, caller) := {"host": host, "port": port, "caller": caller, "command": "pip install x"}

test_indexes if {
	network.allow with input as conn("files.pythonhosted.org", 443, "alice")
	network.allow with input as conn("pypi.org", 443, "alice")
	not network.allow with input as conn("pypi.org", 80, "alice")
	not network.allow with input as conn("evilpypi.org", 443, "alice")
}

test_github_for_ci_only if {
	network.allow with input as conn("api.github.com", 443, "ci")
	not network.allow with input as conn("api.github.com", 443, "alice")
}
