package sandbox.toolx_flexible

default allow = false
default allow_env = false

allowed_args := {"--fast", "--verbose", "--dry-run"}

allow if {
    count(input.args) <= 3
    every a in input.args {
        allowed_args[a]
    }
}
