package jail

import (
	"path"
	"strings"
)

// MaxWorkDir bounds the length of a working directory path, in bytes.
const MaxWorkDir = 255

// systemDirs are the sandbox's places that a working directory may not be,
// nor be below: the kernel's (/proc, /sys, /dev), the host's read-only
// binds and their merged-/usr links (/usr, /bin, /lib...), the generated
// /etc, and /tmp, which is a tmpfs of its own.
var systemDirs = []string{
	"/proc", "/sys", "/dev", "/usr", "/etc", "/tmp",
	"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
}

// ValidateWorkDir reports why p cannot be the sandbox's working directory
// (the tmpfs, or a session's workspace, that is the default cwd and HOME):
// it must be absolute and clean, not "/", at most MaxWorkDir bytes, not one
// of the system directories (/proc, /sys, /dev, /usr, /etc, /tmp, /bin,
// /sbin, /lib*) nor below them, and made of names of letters, digits and
// ". _ - + @", since it is also a home directory in /etc/passwd, a mount
// point, and a path that agents type. The error is an *InvalidError of
// field "workdir".
func ValidateWorkDir(p string) error {
	bad := func(format string, args ...any) error { return invalid("workdir", format, args...) }
	switch {
	case p == "":
		return bad("empty")
	case len(p) > MaxWorkDir:
		return bad("%d bytes: must be at most %d", len(p), MaxWorkDir)
	case !path.IsAbs(p):
		return bad("%q is not absolute", p)
	case path.Clean(p) != p:
		return bad("%q is not clean (it would be %q)", p, path.Clean(p))
	case p == "/":
		return bad(`"/" is the sandbox's read-only root`)
	}
	for _, c := range strings.Split(p[1:], "/") {
		for _, r := range c {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
				strings.ContainsRune("._-+@", r)
			if !ok {
				return bad("%q: the character %q is not allowed (letters, digits and . _ - + @)", p, r)
			}
		}
	}
	for _, d := range systemDirs {
		if within(p, d) {
			return bad("%q is in the sandbox's %s", p, d)
		}
	}
	return nil
}
