package sandbox.python

default allow = false
default allow_env = false

# Allow: python -m http.server
allow if {
    input.args == ["-m", "http.server"]
}

# Optional override example:
# allow_env if {
#     input.env.PYTHONUNBUFFERED == "1"
# }
