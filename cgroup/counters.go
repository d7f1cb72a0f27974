package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Usage is what a sandbox consumed, read after its processes are gone and
// before its cgroup is destroyed.
type Usage struct {
	CPU        time.Duration // user + system
	MemoryPeak int64         // bytes
	OOMKills   uint64        // processes the OOM killer killed
	PidsMax    uint64        // forks refused by the pids limit
}

// Read returns the usage recorded in g: OpenCounters, Read and Close in
// one go.
func (g *Group) Read() (Usage, error) {
	c, err := g.OpenCounters()
	if err != nil {
		return Usage{}, err
	}
	defer c.Close()
	return c.Read()
}

// Counters holds open the four files that hold a group's four figures, no
// more: containerd's Stat reads every counter of each controller (11 files
// on v1 for these three controllers, more on v2), and the read sits between
// a command's exit and its caller's answer. A sandbox opens them while its
// command runs and reads them after its end with one pread each, so that
// the opens (a walk of cgroupfs's path, kernfs's open) and the closes are
// off that way.
//
// pids.events is optional (a hierarchy without the pids controller, an old
// kernel); the others are not, except memory.peak, which v2 has since
// Linux 5.19. The descriptors are bare, never registered with Go's poller
// (cgroupfs files can be polled: os.File would cost each read a round of
// calls with it).
type Counters struct {
	path string
	v2   bool
	// Descriptors, -1 where the file is missing.
	cpu, peak, oom, pids int
}

// OpenCounters opens g's counter files. The error is that of a file that
// must be there.
func (g *Group) OpenCounters() (*Counters, error) {
	c := &Counters{path: g.Path, v2: g.Mode == V2, cpu: -1, peak: -1, oom: -1, pids: -1}
	var cpu, peak, oom, pids string
	if c.v2 {
		d := g.Dirs[0]
		cpu, peak, oom, pids = filepath.Join(d, "cpu.stat"), filepath.Join(d, "memory.peak"), filepath.Join(d, "memory.events"), filepath.Join(d, "pids.events")
	} else {
		cpu, peak, oom, pids = g.v1File("cpuacct", "cpuacct.usage"), g.v1File("memory", "memory.max_usage_in_bytes"), g.v1File("memory", "memory.oom_control"), g.v1File("pids", "pids.events")
	}
	var err error
	if c.cpu, err = openCounter(cpu); err != nil {
		return nil, fmt.Errorf("read cgroup %s: %w", g.Path, err)
	}
	c.peak, err = openCounter(peak)
	if err != nil && !(c.v2 && errors.Is(err, os.ErrNotExist)) {
		c.Close()
		return nil, fmt.Errorf("read cgroup %s: %w", g.Path, err)
	}
	if c.oom, err = openCounter(oom); err != nil {
		c.Close()
		return nil, fmt.Errorf("read cgroup %s: %w", g.Path, err)
	}
	c.pids, _ = openCounter(pids)
	return c, nil
}

// Read reads the figures as they are now: each file from its start, so
// that a second Read sees what changed since the first.
func (c *Counters) Read() (Usage, error) {
	var u Usage
	var buf [512]byte
	if c.v2 {
		usec, err := readKeyAt(c.cpu, buf[:], "usage_usec")
		if err != nil {
			return Usage{}, fmt.Errorf("read cgroup %s: %w", c.path, err)
		}
		u.CPU = time.Duration(usec) * time.Microsecond
	} else {
		ns, err := readUintAt(c.cpu, buf[:])
		if err != nil {
			return Usage{}, fmt.Errorf("read cgroup %s: %w", c.path, err)
		}
		u.CPU = time.Duration(ns)
	}
	if c.peak >= 0 {
		p, err := readUintAt(c.peak, buf[:])
		if err != nil {
			return Usage{}, fmt.Errorf("read cgroup %s: %w", c.path, err)
		}
		u.MemoryPeak = int64(p)
	}
	var err error
	if u.OOMKills, err = readKeyAt(c.oom, buf[:], "oom_kill"); err != nil {
		return Usage{}, fmt.Errorf("read cgroup %s: %w", c.path, err)
	}
	if c.pids >= 0 {
		u.PidsMax, _ = readKeyAt(c.pids, buf[:], "max")
	}
	return u, nil
}

// Close closes the files. It may be called more than once.
func (c *Counters) Close() {
	for _, fd := range []*int{&c.cpu, &c.peak, &c.oom, &c.pids} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// openCounter opens a counter file; "" is a missing one.
func openCounter(file string) (int, error) {
	if file == "" {
		return -1, os.ErrNotExist
	}
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: file, Err: err}
	}
	return fd, nil
}

// readAt reads the whole file fd from its start, into buf if it fits.
func readAt(fd int, buf []byte) ([]byte, error) {
	data := buf[:0]
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := unix.Pread(fd, data[len(data):cap(data)], int64(len(data)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return data, nil
		}
		data = data[:len(data)+n]
	}
}

// readUintAt reads a counter file holding one unsigned number.
func readUintAt(fd int, buf []byte) (uint64, error) {
	data, err := readAt(fd, buf)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
}

// readKeyAt returns the value of key in a flat "key value" counter file.
func readKeyAt(fd int, buf []byte, key string) (uint64, error) {
	data, err := readAt(fd, buf)
	if err != nil {
		return 0, err
	}
	return keyValue(data, key)
}

// keyValue returns the value of key in the lines of a flat "key value"
// file, 0 if it has none.
func keyValue(data []byte, key string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// v1File is the path of file in g's directory of the v1 hierarchy that
// holds controller ctrl ("cpuacct" is in "cpu,cpuacct"), or "" if none
// does, which reads as a missing file.
func (g *Group) v1File(ctrl, file string) string {
	for _, d := range g.Dirs {
		ctrls, _, _ := strings.Cut(strings.TrimPrefix(d, Root+"/"), "/")
		for _, c := range strings.Split(ctrls, ",") {
			if c == ctrl {
				return filepath.Join(d, file)
			}
		}
	}
	return ""
}

// readSmall reads a cgroup file of a few lines without Go's poller (see
// Counters).
func readSmall(file string) ([]byte, error) {
	fd, err := openCounter(file)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var buf [512]byte
	data, err := readAt(fd, buf[:])
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: file, Err: err}
	}
	return data, nil
}

// readUint reads a cgroup file holding one unsigned number.
func readUint(file string) (uint64, error) {
	data, err := readSmall(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
}
