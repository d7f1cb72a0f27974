# Unit tests of each command package, called as the router calls them.
package sandbox.commands_test

import data.sandbox

test_curl_exact_args if {
	sandbox.curl.allow with input as {"args": ["-I", "https://example.com"], "path": "/usr/bin/curl"}
	not sandbox.curl.allow with input as {"args": ["-I", "https://example.org"], "path": "/usr/bin/curl"}
	not sandbox.curl.allow with input as {"args": ["-I", "https://example.com", "-o", "x"], "path": "/usr/bin/curl"}
	not sandbox.curl.allow with input as {"args": ["-I", "https://example.com"], "path": "/work/curl"}
}

test_uname_pinned_hash if {
	sandbox.uname.allow with input as {"args": ["-a"], "path": "/usr/bin/uname", "hash": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	not sandbox.uname.allow with input as {"args": ["-a"], "path": "/usr/bin/uname", "hash": "ffff456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
}

test_date_no_args if {
	sandbox.date.allow with input as {"args": []}
	not sandbox.date.allow with input as {"args": ["-s", "2020-01-01"]}
}

test_build_target_pair if {
	sandbox.build.allow with input as {"args": ["-j4", "--target", "x86"]}
	not sandbox.build.allow with input as {"args": ["--target", "arm"]}
	not sandbox.build.allow with input as {"args": ["x86", "--target"]}
}

test_echo_banned_arg if {
	sandbox.echo.allow with input as {"args": ["hello"]}
	sandbox.echo.allow with input as {"args": []}
	not sandbox.echo.allow with input as {"args": ["a", "--unsafe"]}
}

test_toolx_exactly_three if {
	sandbox.toolx.allow with input as {"args": ["--fast", "--verbose", "--dry-run"]}
	not sandbox.toolx.allow with input as {"args": ["--fast", "--verbose"]}
	not sandbox.toolx.allow with input as {"args": ["--fast", "--verbose", "--rm"]}
}

test_toolx_flexible_at_most_three if {
	sandbox.toolx_flexible.allow with input as {"args": []}
	sandbox.toolx_flexible.allow with input as {"args": ["--fast", "--fast", "--dry-run"]}
	not sandbox.toolx_flexible.allow with input as {"args": ["--fast", "--fast", "--fast", "--fast"]}
	not sandbox.toolx_flexible.allow with input as {"args": ["--rm"]}
}

test_toolx_segments if {
	sandbox.toolx_segments.allow with input as {"args": []}
	sandbox.toolx_segments.allow with input as {"args": ["--fast", "--target", "x86", "--verbose"]}
	sandbox.toolx_segments.allow with input as {"args": ["--target", "x86", "--target", "x86"]}
	not sandbox.toolx_segments.allow with input as {"args": ["--target"]}
	not sandbox.toolx_segments.allow with input as {"args": ["x86"]}
	not sandbox.toolx_segments.allow with input as {"args": ["--target", "x86", "x86"]}
	not sandbox.toolx_segments.allow with input as {"args": ["--target", "--target", "x86"]}
	not sandbox.toolx_segments.allow with input as {"args": ["--fast", "--rm"]}
}

test_env_only_for_python if {
	sandbox.python3.allow_env with input as {"env": {"PYTHONUNBUFFERED": "1"}}
	not sandbox.python3.allow_env with input as {"env": {"LD_PRELOAD": "x"}}
	not sandbox.date.allow_env with input as {"env": {"PYTHONUNBUFFERED": "1"}}
	data.sandbox.main.allow with input as {"command": "python3", "path": "/usr/bin/python3.11", "args": ["-m", "http.server"], "env": {"PYTHONUNBUFFERED": "1"}}
	not data.sandbox.main.allow with input as {"command": "date", "path": "/usr/bin/date", "args": [], "env": {"PYTHONUNBUFFERED": "1"}}
}

test_git_allow_and_deny_lists if {
	sandbox.git.allow with input as {"args": ["status"]}
	sandbox.git.allow with input as {"args": ["commit", "-m", "x"]}
	not sandbox.git.allow with input as {"args": ["push", "origin", "main"]}
	not sandbox.git.allow with input as {"args": ["config", "user.name", "x"]}
	not sandbox.git.allow with input as {"args": ["-c", "core.pager=sh", "log"]}
	not sandbox.git.allow with input as {"args": ["gc"]}
	not sandbox.git.allow with input as {"args": []}
}
