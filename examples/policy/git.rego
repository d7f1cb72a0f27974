# An agent's git: an allowlist of subcommands, with a denylist on top that
# wins (push and config are refused even if added to the allowlist), and
# no -c or --exec-path, which would let git run other programs.
package sandbox.git

default allow := false

default allow_env := false

allowed := {"status", "log", "diff", "show", "add", "commit", "branch", "checkout", "switch", "init", "rev-parse", "push", "config"}

denied := {"push", "config"}

subcommand := input.args[0]

allow if {
	count(input.args) > 0
	allowed[subcommand]
	not denied[subcommand]
	not global_option
}

global_option if {
	some a in input.args
	regex.match(`^(-c|--exec-path|--git-dir|--work-tree|-C|--config-env)(=|$)`, a)
}
