package sandbox.build

default allow = false
default allow_env = false

allow if {
    some i
    i + 1 < count(input.args)
    input.args[i] == "--target"
    input.args[i + 1] == "x86"
}
