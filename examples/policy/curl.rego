# Exact args: curl -I https://example.com, the system's curl only.
package sandbox.curl

default allow := false

default allow_env := false

allow if {
	input.args == ["-I", "https://example.com"]
	startswith(input.path, "/usr/bin/")
}
