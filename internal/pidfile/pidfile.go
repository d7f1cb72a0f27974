// Package pidfile names a running daemon to the commands that signal it
// (jaild drain): a file holding the daemon's pid, locked with flock(2) for
// as long as the daemon lives. A pid read from a file whose lock is free
// is stale, and is never signalled: the pid may have been reused.
package pidfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotRunning: no live process holds the pid file.
var ErrNotRunning = errors.New("no daemon holds the pid file")

// ErrHeld: another live process holds the pid file.
var ErrHeld = errors.New("the pid file is held by another daemon")

// File is a pid file this process holds.
type File struct {
	f *os.File
}

// Create writes this process's pid to path (mode 0644, made if missing)
// and holds it until Close or exit. It fails with ErrHeld if another live
// process holds it.
func Create(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrHeld)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &File{f: f}, nil
}

// Close removes the file and releases it.
func (p *File) Close() error {
	err := os.Remove(p.f.Name())
	return errors.Join(err, p.f.Close())
}

// Signal sends sig to the live process that holds the pid file at path,
// through a pidfd taken while the file was held, so that a pid reused
// after the holder's exit is never signalled. It returns the pid.
func Signal(path string, sig unix.Signal) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%s: %w", path, ErrNotRunning)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if !held(f) {
		return 0, fmt.Errorf("%s: %w", path, ErrNotRunning)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds no pid: %q", path, data)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("%s: pid %d: %w", path, pid, err)
	}
	defer unix.Close(pidfd)
	// Held still, the file names the pidfd's process: the holder wrote
	// its pid before it could be seen held, and unlinks it only on exit.
	if !held(f) {
		return 0, fmt.Errorf("%s: %w", path, ErrNotRunning)
	}
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil {
		return 0, fmt.Errorf("signal pid %d: %w", pid, err)
	}
	return pid, nil
}

// Wait returns once no process holds the pid file at path, or fails when
// timeout passes first (zero: no limit).
func Wait(path string, timeout time.Duration) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for held(f) {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%s still held after %s", path, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// held reports whether a process holds the lock on f (another open file
// description: this one's shared lock is tried and given back).
func held(f *os.File) bool {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
