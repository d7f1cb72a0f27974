// Package sibling opens and executes the other binary of jaild, installed
// next to the running one: the lean jaild executes jaild-server for serve,
// mcp and remote, and jaild-server starts the lean jaild as its worker. As
// both run as root, the binary they execute must be as safe from tampering
// as they are, and is checked and executed through one open descriptor.
package sibling

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open opens the binary name, which must be next to the running binary, and
// returns its path and an O_PATH descriptor for it (close-on-exec). It must
// be a regular file owned by the running binary's owner (by root when it
// runs as root), writable by no one else, in a directory that only root or
// that owner may write to (else another user could put any root-owned
// program there under this name, by a hard link). The checks are made on
// the opened file, and callers execute that descriptor rather than the
// path, so the file cannot be swapped between the check and the exec.
func Open(name string) (string, int, error) {
	exe, err := os.Executable()
	if err != nil {
		return name, -1, fmt.Errorf("cannot find this binary to find %s next to it: %w", name, err)
	}
	dir := filepath.Dir(exe)
	bin := filepath.Join(dir, name)
	// The running binary itself, even if its path was replaced since.
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		return bin, -1, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	owner := self.Uid
	if os.Geteuid() == 0 {
		owner = 0
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return bin, -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	// O_PATH: the descriptor serves fstat and execveat, which need no
	// read permission, only what execve itself checks. O_NOFOLLOW: a
	// symlink gives a descriptor of the link, refused below.
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return bin, -1, &os.PathError{Op: "open", Path: bin, Err: err}
	}
	var d, st unix.Stat_t
	if err = unix.Fstat(dfd, &d); err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err == nil {
		err = check(bin, &st, dir, &d, owner, filepath.Base(exe))
	}
	if err != nil {
		unix.Close(fd)
		return bin, -1, err
	}
	return bin, fd, nil
}

// check applies Open's rules to the stat of bin and of its directory; self
// names the running binary in the advice.
func check(bin string, st *unix.Stat_t, dir string, d *unix.Stat_t, owner uint32, self string) error {
	who, user, dirWho := "root", "root", "root"
	if owner != 0 {
		who = fmt.Sprintf("uid %d (%s's owner)", owner, self)
		user = fmt.Sprint(owner)
		dirWho = "root or " + who
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%s is a symlink: install the binary itself next to %s", bin, self)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file", bin)
	case st.Uid != owner:
		return fmt.Errorf("%s is owned by uid %d, not %s: chown %s %s", bin, st.Uid, who, user, bin)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o): chmod go-w %s", bin, st.Mode&0o7777, bin)
	case d.Uid != 0 && d.Uid != owner:
		return fmt.Errorf("%s is owned by uid %d, not %s: chown root %s", dir, d.Uid, dirWho, dir)
	case d.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o): chmod go-w %s", dir, d.Mode&0o7777, dir)
	}
	return nil
}

// Exec replaces the process with the file open as fd, as fexecve(3) does;
// it returns only if that fails. Unlike syscall.Exec it does not hold the
// runtime's lock against creating threads during the exec, which only
// matters when the exec raises privileges (set-uid bits, file
// capabilities; Go issue 19546), and it does not restore the soft
// RLIMIT_NOFILE that Go raised at start, which a Go program raises again
// itself. On kernels before 6.14 (without the backport of "exec: fix up
// /proc/pid/comm in the execveat(AT_EMPTY_PATH) case") the new process's
// comm (ps -e, pgrep) is the descriptor's number; its argv (ps -f) is
// argv either way.
func Exec(fd int, argv, env []string) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return fmt.Errorf("execveat: %w", errno)
}
