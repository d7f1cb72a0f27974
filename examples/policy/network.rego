# Connections of sandboxes given egress (jaild's proxy asks this once the
# allowlists, --egress-allow or a token's list, let a connection through).
# input: host, port, caller, command, session_id, request_id, front_end.
# Undefined denies: with a policy loaded, nothing gets out without this
# package.
package sandbox.network

default allow := false

# Package indexes, for every caller, over HTTPS only.
allow if {
	input.port == 443
	some suffix in {".pypi.org", ".pythonhosted.org", ".npmjs.org"}
	endswith(input.host, suffix)
}

allow if {
	input.port == 443
	input.host in {"pypi.org", "registry.npmjs.org"}
}

# The ci token may also reach GitHub's API.
allow if {
	input.caller == "ci"
	input.host == "api.github.com"
	input.port == 443
}
