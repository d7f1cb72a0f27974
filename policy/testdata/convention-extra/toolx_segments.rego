package sandbox.toolx_segments

default allow = false
default allow_env = false

single_args := {"--fast", "--verbose", "--dry-run"}

allow if {
    valid_from(0)
}

valid_from(i) if {
    i == count(input.args)
}

valid_from(i) if {
    i < count(input.args)
    single_args[input.args[i]]
    valid_from(i + 1)
}

valid_from(i) if {
    i + 1 < count(input.args)
    input.args[i] == "--target"
    input.args[i + 1] == "x86"
    valid_from(i + 2)
}
