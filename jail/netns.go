package jail

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// newNetNS creates a network namespace whose only interface is loopback,
// up, and returns its nsfs file: the namespace lives as long as that file
// or a process in it. in, if not nil, runs on the thread that is in the
// namespace, so that a socket it makes belongs to the namespace. Every
// sandbox's namespace is made so: a workspace's and an egress sandbox's
// for their life, a sandbox of its own's for its init to join (cheaper
// than the init's own, whose loopback libcontainer sets up through
// netlink: docs/performance.md).
//
// The namespace belongs to the host's user namespace: sandboxes join it
// (runc's nsexec joins namespace paths, such as /proc/<pid>/fd/<n> of this
// file, see procFD, before it unshares the sandbox's user namespace) but
// their root, whose capabilities are those of the sandbox's own user
// namespace, cannot reconfigure it: no interface, route or firewall rule
// can be added from inside, so it stays loopback only.
func newNetNS(in func() error) (*os.File, error) {
	type answer struct {
		ns  *os.File
		err error
	}
	done := make(chan answer, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to the namespace it came from, and only
		// then to the scheduler; if it cannot, it stays locked and ends
		// with this goroutine: no other goroutine ever runs in the new
		// namespace.
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- answer{nil, fmt.Errorf("open this thread's netns: %w", err)}
			return
		}
		defer home.Close()
		ns, err := func() (*os.File, error) {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("unshare netns: %w", err)
			}
			if err := loopbackUp(); err != nil {
				return nil, err
			}
			ns, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
			if err != nil {
				return nil, fmt.Errorf("open netns: %w", err)
			}
			if in != nil {
				if err := in(); err != nil {
					ns.Close()
					return nil, err
				}
			}
			return ns, nil
		}()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- answer{ns, err}
	}()
	a := <-done
	return a.ns, a.err
}

// pinNetNS bind-mounts the namespace ns on path, which must not exist, so
// that it outlives ns and a sweep finds it by name.
func pinNetNS(ns *os.File, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create netns mount point: %w", err)
	}
	f.Close()
	if err := unix.Mount(procFD(ns), path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("pin netns: %w", err)
	}
	return nil
}

// procFD is the path of f through this process's fd table,
// /proc/<pid>/fd/<n>: a path that a child process of this one (a
// sandbox's nsexec, libcontainer's mount source thread) can open while f is
// open. The number is reused once f is closed, so the path must not be
// handed to anything that may open it later than that.
func procFD(f *os.File) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
}

// loopbackUp sets lo up in the calling thread's network namespace, as
// libcontainer's "loopback" network does for a sandbox of its own: the
// kernel then gives it 127.0.0.1/8 and ::1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: set flags: %w", err)
	}
	return nil
}

// removeNetNS unpins the namespace at path and removes the file. The
// namespace itself ends once no process is left in it. A path that is
// missing or not mounted is not an error: a sweep may repeat the removal.
func removeNetNS(path string) error {
	return unmountAndRemove(path, os.Remove)
}

// unmountAll detaches whatever is mounted on path, without following a
// symlink; a path missing or not mounted is not an error.
func unmountAll(path string) error {
	// MNT_DETACH: a process still holding the mount (a sandbox's
	// lingering bind) must not make the removal fail; the kernel frees
	// it when the last user goes.
	// Repeated until nothing is left: a mount stacked on another (which
	// jaild never makes) would otherwise keep the path busy.
	for range 8 {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not (or no longer) a mount point
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return nil
}

// unmountAndRemove detaches whatever is mounted on path, without following
// a symlink, then removes the mount point with rm (os.Remove for a file,
// unix.Rmdir for a directory: neither follows symlinks nor walks a tree).
func unmountAndRemove(path string, rm func(string) error) error {
	if err := unmountAll(path); err != nil {
		return err
	}
	if err := rm(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
