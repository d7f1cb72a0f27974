package sandbox.curl

default allow = false
default allow_env = false

# Allow only the expected curl binary and invocation.
allow if {
    input.args == ["-I", "https://example.com"]
    input.path == "/usr/bin/curl"
    input.hash == "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}
