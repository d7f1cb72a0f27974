# Env allowed for one command only: python may get PYTHONUNBUFFERED=1, and
# every other package keeps allow_env false, so the router refuses any env
# for them.
package sandbox.python3

default allow := false

default allow_env := false

# /usr/bin/python3 is a symlink to the versioned file.
binaries := {"python3.11", "python3.12", "python3.13"}

allow if input.args == ["-m", "http.server"]

allow_env if object.keys(input.env) == {"PYTHONUNBUFFERED"}
