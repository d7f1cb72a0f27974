package jail

import "testing"

// TestHostOwned: a tmpfs's uid and gid, ids of the sandbox's user namespace
// (its root's when absent), become the host's ids of the sandbox's range;
// the other options stay as they were.
func TestHostOwned(t *testing.T) {
	const host = 1 << 30
	for _, tt := range []struct{ data, want string }{
		{"mode=1777,size=65536", "mode=1777,size=65536,uid=1073741824,gid=1073741824"},
		{"mode=755,size=4096,uid=1000,gid=1000", "mode=755,size=4096,uid=1073742824,gid=1073742824"},
		{"uid=1000", "uid=1073742824,gid=1073741824"},
		{"", "uid=1073741824,gid=1073741824"},
	} {
		if got := hostOwned(tt.data, host); got != tt.want {
			t.Errorf("hostOwned(%q) = %q; want %q", tt.data, got, tt.want)
		}
	}
}
