package jail

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A sweep must tell the slots whose owner died from those a live process
// holds, and the flock is how: one open, flock and close per slot file.
// Beside a daemon whose 2,000 sessions hold slots, every jail.New (each
// `jaild run`, `jaild mcp`, a second daemon) and every periodic sweep paid
// 6,000 system calls for slots it could never take. slotScan lists the
// slot files with their inodes from the directory's own entries and reads
// /proc/locks once: a file under an exclusive flock that this process can
// see is passed by unopened. The snapshot only ever skips: a lock it does
// not show (its owner in another pid namespace, a file on a filesystem
// whose entries' inode numbers are not its files', a lock taken after it)
// is found by the flock as before, and a lock released after it leaves
// its orphan to the next sweep, as a live owner's slot would be.

// slotFile is a slot file as its directory lists it.
type slotFile struct {
	n   int
	ino uint64
}

// slotScan lists the slot files of dir and the inodes on its device under
// an exclusive flock (nil if /proc/locks cannot be read).
func slotScan(dir string) ([]slotFile, map[uint64]bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return nil, nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	files, err := readSlotEntries(int(d.Fd()))
	if err != nil {
		return nil, nil, &os.PathError{Op: "getdents", Path: dir, Err: err}
	}
	return files, flockedInodes(st.Dev), nil
}

// readSlotEntries reads the entries of the directory fd whose names are
// slot numbers, with the inode numbers the directory gives them, without
// a stat per entry.
func readSlotEntries(fd int) ([]slotFile, error) {
	var out []slotFile
	buf := make([]byte, 32<<10)
	for {
		k, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k <= 0 {
			return out, nil
		}
		// struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16,
		// d_type u8, then the name, NUL-terminated.
		for off := 0; off+19 <= k; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > k {
				return nil, fmt.Errorf("bad directory entry of length %d", reclen)
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if n, ok := slotNumber(string(name)); ok {
				out = append(out, slotFile{n: n, ino: binary.NativeEndian.Uint64(buf[off:])})
			}
			off += reclen
		}
	}
}

// flockedInodes returns the inodes on device dev that /proc/locks shows
// under an exclusive flock, or nil if it cannot be read. Its lines read
// "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF", the device in hex;
// a waiter's has "->" after its number.
func flockedInodes(dev uint64) map[uint64]bool {
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil
	}
	prefix := fmt.Sprintf("%02x:%02x:", unix.Major(dev), unix.Minor(dev))
	out := make(map[uint64]bool)
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
			continue
		}
		rest, ok := strings.CutPrefix(f[5], prefix)
		if !ok {
			continue
		}
		if ino, err := strconv.ParseUint(rest, 10, 64); err == nil {
			out[ino] = true
		}
	}
	return out
}
