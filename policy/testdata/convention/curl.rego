package sandbox.curl

default allow = false
default allow_env = false

# Allow: curl -I https://example.com
allow if {
    input.args == ["-I", "https://example.com"]
    startswith(input.path, "/usr/bin/")
}

# This command intentionally allows no forwarded env vars.
