package sandbox.main

default allow = false

allow if {
    data.sandbox[input.command].allow
    env_allowed
}

env_allowed if {
    count(object.keys(input.env)) == 0
}

env_allowed if {
    data.sandbox[input.command].allow_env
}
