# A required pair: --target x86 must be among the args.
package sandbox.build

default allow := false

default allow_env := false

allow if {
	some i
	input.args[i] == "--target"
	input.args[i + 1] == "x86"
}
