package sandbox.echo

default allow = false
default allow_env = false

allow if {
    not banned_arg_present
}

banned_arg_present if {
    some i
    input.args[i] == "--unsafe"
}
