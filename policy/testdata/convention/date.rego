package sandbox.date

default allow = false
default allow_env = false

allow if {
    count(input.args) == 0
}
