# Singles and pairs: each arg is one of the singles, or part of a
# "--target x86" pair. The policy-runner convention writes this as a
# recursive function (valid_from(i) calls valid_from(i + 1)), which OPA
# rejects: recursion is not supported. As "--target" and "x86" are no
# singles, the split into segments is unambiguous and each arg can be
# checked by looking at its neighbours alone.
package sandbox.toolx_segments

default allow := false

default allow_env := false

single_args := {"--fast", "--verbose", "--dry-run"}

allow if {
	every i, a in input.args {
		valid_at(i, a)
	}
}

valid_at(_, a) if single_args[a]

valid_at(i, "--target") if input.args[i + 1] == "x86"

valid_at(i, "x86") if {
	i > 0
	input.args[i - 1] == "--target"
}
