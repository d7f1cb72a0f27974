package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/jail"
)

// serverBinary is the complete build of this package, which the lean
// build's front-end commands execute. It is looked up next to the running
// binary, never in PATH.
const serverBinary = "jaild-server"

// In the lean build serve, mcp and remote are stand-ins that replace the
// process with jaild-server, so the daemon keeps jaild's pid (systemd's
// MainPID, an MCP client's child) and its stdio. Their flags and help are
// jaild-server's own: `jaild serve --help` prints them.
var (
	serveCommand  = frontEnd("serve", command.ServeUsage)
	mcpCommand    = frontEnd("mcp", command.MCPUsage)
	remoteCommand = frontEnd("remote", command.RemoteUsage)
)

func frontEnd(name, usage string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           usage,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			return execServer(name, c.Args().Slice())
		},
	}
}

// openServer opens jaild-server, which must be next to this binary, and
// returns its path and a descriptor for it. As jaild runs it as root, it
// must be as safe from tampering as jaild itself: a regular file owned by
// jaild's owner (by root when jaild runs as root), writable by no one
// else, in a directory that only root or that owner may write to (else
// another user could put any root-owned program there under this name, by
// a hard link). The checks are made on the opened file, and execServer
// executes that descriptor rather than the path, so the file cannot be
// swapped between the check and the exec.
func openServer() (string, int, error) {
	exe, err := os.Executable()
	if err != nil {
		return serverBinary, -1, fmt.Errorf("cannot find this binary to find %s next to it: %w", serverBinary, err)
	}
	dir := filepath.Dir(exe)
	bin := filepath.Join(dir, serverBinary)
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
	fd, err := unix.Openat(dfd, serverBinary, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return bin, -1, &os.PathError{Op: "open", Path: bin, Err: err}
	}
	var d, srv unix.Stat_t
	if err = unix.Fstat(dfd, &d); err == nil {
		err = unix.Fstat(fd, &srv)
	}
	if err == nil {
		err = checkServer(bin, &srv, dir, &d, owner)
	}
	if err != nil {
		unix.Close(fd)
		return bin, -1, err
	}
	return bin, fd, nil
}

// checkServer applies openServer's rules to the stat of jaild-server (bin)
// and of its directory.
func checkServer(bin string, srv *unix.Stat_t, dir string, d *unix.Stat_t, owner uint32) error {
	who, user, dirWho := "root", "root", "root"
	if owner != 0 {
		who = fmt.Sprintf("uid %d (jaild's owner)", owner)
		user = fmt.Sprint(owner)
		dirWho = "root or " + who
	}
	switch {
	case srv.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%s is a symlink: install the binary itself next to jaild", bin)
	case srv.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file", bin)
	case srv.Uid != owner:
		return fmt.Errorf("%s is owned by uid %d, not %s: chown %s %s", bin, srv.Uid, who, user, bin)
	case srv.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o): chmod go-w %s", bin, srv.Mode&0o7777, bin)
	case d.Uid != 0 && d.Uid != owner:
		return fmt.Errorf("%s is owned by uid %d, not %s: chown root %s", dir, d.Uid, dirWho, dir)
	case d.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o): chmod go-w %s", dir, d.Mode&0o7777, dir)
	}
	return nil
}

// execServer replaces the process with jaild-server COMMAND ARGS..., with
// the same environment; it returns only if that fails. argv[0] stays the
// path, which ps and systemd show. The new process's /proc/self/exe is the
// file itself, as with execve, which matters: libcontainer executes
// /proc/self/exe again as each sandbox's init.
func execServer(command string, args []string) error {
	bin, fd, err := openServer()
	if err == nil {
		argv := append([]string{bin, command}, args...)
		err = execveat(fd, argv, os.Environ())
		unix.Close(fd)
	}
	return cli.Exit(fmt.Sprintf("%s is run by %s, which cannot be executed: %v (scripts/setup.sh builds it next to jaild)", command, bin, err), api.ExitInternal)
}

// execveat executes the file open as fd, as fexecve(3) does. Unlike
// syscall.Exec it does not hold the runtime's lock against creating
// threads during the exec, which only matters when the exec raises
// privileges (set-uid bits, file capabilities; Go issue 19546), and it
// does not restore the soft RLIMIT_NOFILE that Go raised at start, which
// jaild-server raises again itself. On kernels before 6.14 (without the
// backport of "exec: fix up /proc/pid/comm in the execveat(AT_EMPTY_PATH)
// case") the new process's comm (ps -e, pgrep) is the descriptor's number;
// its argv (ps -f) is the path either way.
func execveat(fd int, argv, env []string) error {
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

// frontEnds is jaild doctor's finding on jaild-server.
func frontEnds() jail.Finding {
	f := jail.Finding{Name: "front ends"}
	bin, fd, err := openServer()
	if err == nil {
		unix.Close(fd)
		err = unix.Access(bin, unix.X_OK)
	}
	if err != nil {
		f.Detail = fmt.Sprintf("serve, mcp and remote need a usable %s next to jaild: %v", serverBinary, err)
		return f
	}
	f.OK, f.Detail = true, "serve, mcp and remote run "+bin
	return f
}
