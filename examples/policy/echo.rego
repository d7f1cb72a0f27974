# A banned arg: anything but --unsafe.
package sandbox.echo

default allow := false

default allow_env := false

allow if not banned_arg_present

banned_arg_present if "--unsafe" in input.args
