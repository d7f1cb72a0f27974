package jail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jaild/jaild/cgroup"
	"github.com/jaild/jaild/fdstore"
	"golang.org/x/sys/unix"
)

// Each sandbox's user namespace maps container ids 0..slotSize-1 to a host
// range of its own, far above ordinary users and the usual /etc/subuid
// ranges, so that no two live sandboxes share an id and no sandbox id is a
// real host user.
const (
	slotBase  = 1 << 30
	slotSize  = 1 << 16
	slotCount = 4096 // slotBase + slotCount*slotSize stays below 2^31
)

// SlotDir holds one lock file per live sandbox. It is host-wide, not per
// state dir, because host uid ranges are a host-wide resource: every jaild
// process on the host (daemon, one-shot runs, tests) allocates from it.
// Beside the slot files (named by number) it holds the search hint,
// nextSlotFile.
const SlotDir = "/run/jaild/slots"

// nextSlotFile, in a slot dir, names the slot after the one taken last by
// any jaild process on the host: the next search starts there and goes
// round the ring, so that slots are taken in turn. A search from slot 0
// passed over every slot held by another process, with an open, a flock
// and a close each: beside a daemon whose 2,000 sessions hold slots
// 0-1999, every sandbox of a `jaild run`, a `jaild mcp` or a second daemon
// paid 2,000 of them. Taken in turn, a search passes over the slots still
// held since the ring's last round, mostly long-lived sessions. The hint
// only orders the search: it is read and written without a lock, and a
// lost update or a bad value costs a longer search, never a shared slot
// (the flock decides). Its name is not a number, so sweeps and doctor
// pass it by.
const nextSlotFile = ".next"

// record is what a slot file says about the sandbox that holds it: enough
// for any jaild to tear the sandbox down once its owner has died.
type record struct {
	ID        string        `json:"id"`
	StateRoot string        `json:"state_root"`
	Cgroup    *cgroup.Group `json:"cgroup"`
	Owner     int           `json:"owner_pid"`
	// Workspace marks the slot of a [Workspace] rather than of one
	// sandbox: its tmpfs is mounted at Dir (<workspace root>/<ID>; a
	// record without one, written before workspace roots, at a path
	// derived from StateRoot and ID) unless Detached, a network
	// namespace of a jaild before held namespaces by descriptor may be
	// pinned at a path derived from StateRoot and ID (see
	// workspacePaths), and Sandboxes lists the sandboxes that run on its
	// uid range.
	Workspace bool   `json:"workspace,omitempty"`
	Dir       string `json:"dir,omitempty"`
	// Detached marks a workspace whose tmpfs is mounted nowhere on the
	// host (see detachedTmpfs): nothing of it outlives its owner but
	// its sandboxes. Its Dir is the path it is reached at while its
	// owner lives (/proc/<owner>/fd/<n>/.), which a sweep never uses.
	Detached bool `json:"detached,omitempty"`
	// NetNS marks a sandbox with egress: its network namespace is
	// pinned at a path derived from StateRoot and ID (see egressNetNS).
	NetNS     bool     `json:"netns,omitempty"`
	Sandboxes []member `json:"sandboxes,omitempty"`
}

// member is a sandbox of a workspace, as its slot record lists it.
type member struct {
	ID     string        `json:"id"`
	Cgroup *cgroup.Group `json:"cgroup"`
}

// slot is a held uid range. The flock on f is the proof of ownership: the
// kernel drops it when the owner exits, however it exits, which is how a
// sweep tells an orphan from a live sandbox without trusting pids.
type slot struct {
	n    int
	dir  string
	path string
	f    *os.File
	// store holds the flock's descriptor instead of f, number lock, for
	// a workspace's slot (see stow); nil otherwise.
	store *fdstore.Store
	lock  int
}

// stow hands the slot's locked file to the descriptor store st, where it
// is number n (st already holds it), and closes f: the flock belongs to
// the open file description, which the store's copy keeps.
func (s *slot) stow(st *fdstore.Store, n int) {
	s.f.Close()
	s.f, s.store, s.lock = nil, st, n
}

// held marks the slots this process holds, per slot dir. Another open of a
// held slot's file could not take its flock anyway (flocks belong to open
// file descriptions), so acquireSlot skips them without a syscall: with
// thousands of sessions each holding one, a sandbox's uid range would
// otherwise cost an open, a flock and a close per live session.
var held struct {
	sync.Mutex
	dirs map[string][]bool // dir -> slotCount marks
}

// isHeld reports whether this process holds slot n of dir.
func isHeld(dir string, n int) bool {
	held.Lock()
	defer held.Unlock()
	marks := held.dirs[dir]
	return marks != nil && marks[n]
}

// markHeld records that this process holds (or no longer holds) slot n of
// dir.
func markHeld(dir string, n int, on bool) {
	held.Lock()
	defer held.Unlock()
	if held.dirs == nil {
		held.dirs = make(map[string][]bool)
	}
	marks := held.dirs[dir]
	if marks == nil {
		marks = make([]bool, slotCount)
		held.dirs[dir] = marks
	}
	marks[n] = on
}

func (s *slot) hostID() int { return slotBase + s.n*slotSize }

// slotNumber reads a slot file's name (or the hint's contents) as the
// slot it names; ok is false for anything else in a slot dir.
func slotNumber(name string) (n int, ok bool) {
	n, err := strconv.Atoi(name)
	return n, err == nil && n >= 0 && n < slotCount
}

// acquireSlot takes the first free slot from the search hint on (see
// nextSlotFile), round the ring, and writes rec into it. A free slot whose
// file still names a sandbox belonged to a dead jaild: it is taken only
// when no clean slot is left, its orphan torn down first, since it may
// still run with this uid range. Orphans are otherwise left to their own
// installation's watchdog and sweeps: a start does not stall on another
// installation's teardowns, and its own sweep's tests do not race with
// every other jaild on the host.
func acquireSlot(dir string, rec *record, sweep func(*record) error) (*slot, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	hint := openSlotHint(dir)
	if hint != nil {
		defer hint.Close()
	}
	start := readSlotHint(hint)
	for _, orphans := range []bool{false, true} {
		for i := 0; i < slotCount; i++ {
			n := (start + i) % slotCount
			if isHeld(dir, n) {
				continue
			}
			s, old, err := lockSlot(dir, n)
			var torn *tornError
			if errors.As(err, &torn) {
				continue // reported by every sweep
			}
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue // held by a live sandbox
			}
			if old != nil {
				if !orphans {
					s.f.Close()
					continue
				}
				if err := sweep(old); err != nil {
					// Leave the file: the next sweep retries. Its
					// uid range may still be in use, so skip it.
					s.f.Close()
					continue
				}
			}
			if err := s.f.Truncate(0); err == nil {
				_, err = s.f.WriteAt(data, 0)
			}
			if err != nil {
				s.release()
				return nil, fmt.Errorf("write slot %d: %w", n, err)
			}
			markHeld(dir, n, true)
			writeSlotHint(hint, (n+1)%slotCount)
			return s, nil
		}
	}
	return nil, errors.New("jail: all sandbox uid ranges are in use")
}

// openSlotHint opens dir's search hint, made if missing; nil if it cannot
// be opened as a regular file (the search then starts at slot 0).
func openSlotHint(dir string) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, nextSlotFile), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil
	}
	return f
}

// slotHintLen is the hint's fixed width: four digits and a newline, so
// that each write replaces the whole of the last one.
const slotHintLen = 5

// readSlotHint returns the slot the hint names, or 0 if it names none.
func readSlotHint(f *os.File) int {
	if f == nil {
		return 0
	}
	var b [slotHintLen]byte
	k, _ := f.ReadAt(b[:], 0)
	n, ok := slotNumber(strings.TrimSpace(string(b[:k])))
	if !ok {
		return 0
	}
	return n
}

// writeSlotHint makes f name slot n.
func writeSlotHint(f *os.File, n int) {
	if f != nil {
		_, _ = f.WriteAt(fmt.Appendf(nil, "%04d\n", n), 0)
	}
}

// lockSlot tries to lock slot n. It returns (nil, nil, nil) if a live owner
// holds it, a *tornError (and no slot) if its file holds no record, and
// otherwise the locked slot plus the record a dead owner left in it, if any.
func lockSlot(dir string, n int) (*slot, *record, error) {
	p := filepath.Join(dir, strconv.Itoa(n))
	for {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("open slot: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("lock slot %s: %w", p, err)
		}
		// A releasing owner unlinks the file before closing it; if we
		// locked such an unlinked file, start over on the path.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(p, &b) != nil || a.Ino != b.Ino {
			f.Close()
			continue
		}
		s := &slot{n: n, dir: dir, path: p, f: f}
		data, err := io.ReadAll(f)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("read slot %s: %w", p, err)
		}
		if len(data) == 0 {
			// A fresh file, or a crash between acquireSlot's truncate
			// and its write: nothing ran on the range yet.
			return s, nil, nil
		}
		old, err := parseRecord(data)
		if err != nil {
			f.Close()
			return nil, nil, &tornError{path: p, n: n, head: data, err: err}
		}
		return s, old, nil
	}
}

// parseRecord reads a slot file's record. Anything else (a torn write, a
// stray process's bytes, a record without its sandbox's id) says nothing
// of what runs on the slot's uid range.
func parseRecord(data []byte) (*record, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, err
	}
	if rec.ID == "" {
		return nil, errors.New("no sandbox id")
	}
	return &rec, nil
}

// tornError is a slot file that holds something other than a record. What
// ran on its uid range is unknown, and may still run: the slot is not
// swept (its cgroups and state are found by no record) and never handed
// out again, until an operator has looked and removed the file.
type tornError struct {
	path string
	n    int
	head []byte
	err  error
}

func (e *tornError) Error() string {
	head := e.head
	if len(head) > 64 {
		head = head[:64]
	}
	first := slotBase + e.n*slotSize
	return fmt.Sprintf("slot file %s holds no sandbox record (%v; it begins %q): its uid range %d-%d stays out of use until the file is removed by hand, once no process runs as those uids", e.path, e.err, head, first, first+slotSize-1)
}

func (e *tornError) Unwrap() error { return e.err }

// rewrite replaces the record of a held slot. It is one pwrite at offset 0,
// padded with spaces (JSON whitespace) over whatever the old record held
// beyond the new one, never a truncate then a write: a jaild killed between
// the two would leave an empty record, and the sweep would then know
// nothing of the sandboxes it must tear down.
func (s *slot) rewrite(rec *record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f := s.f
	if f == nil && s.store != nil {
		// The lock is in the store; the file is this slot's while it
		// holds it (only the holder unlinks it).
		fd, err := unix.Open(s.path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("rewrite slot %d: %w", s.n, err)
		}
		f = os.NewFile(uintptr(fd), s.path)
		defer f.Close()
	}
	if f == nil {
		return fmt.Errorf("rewrite slot %d: not held", s.n)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("rewrite slot %d: %w", s.n, err)
	}
	if old := int(fi.Size()); old > len(data) {
		data = append(data, bytes.Repeat([]byte{' '}, old-len(data))...)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("rewrite slot %d: %w", s.n, err)
	}
	return nil
}

// release unlinks the slot file, then drops the lock.
func (s *slot) release() {
	if s.f == nil && s.store == nil {
		return
	}
	_ = os.Remove(s.path)
	s.keep()
}

// keep closes a held slot's file but leaves its record: the flock goes, and
// the next sweep (or a slot allocation that needs the range) tears down
// what the record names.
func (s *slot) keep() {
	switch {
	case s.f != nil:
		s.f.Close()
		s.f = nil
	case s.store != nil:
		// Fails only on a shut store, whose end closed the lock.
		_ = s.store.Close(s.lock)
		s.store = nil
	default:
		return
	}
	markHeld(s.dir, s.n, false)
}

// sweepSlots tears down every sandbox whose owner has died and whose record
// mine accepts, and returns how many it found. Slots held by live owners
// are never touched; those this process holds, and those /proc/locks shows
// under a flock, are not even opened (see slotScan).
func sweepSlots(dir string, mine func(*record) bool, sweep func(*record) error) (int, error) {
	files, locked, err := slotScan(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	var (
		found int
		errs  []error
	)
	for _, e := range files {
		if isHeld(dir, e.n) || locked[e.ino] {
			continue
		}
		s, old, err := lockSlot(dir, e.n)
		if err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			errs = append(errs, err)
			continue
		}
		if s == nil {
			continue
		}
		if old != nil && !mine(old) {
			s.f.Close() // another's orphan: left to its own watchdog or a sweep
			continue
		}
		if old != nil {
			found++
			if err := sweep(old); err != nil {
				errs = append(errs, fmt.Errorf("sweep sandbox %s: %w", old.ID, err))
				s.f.Close() // keep the record for the next try
				continue
			}
		}
		s.release()
	}
	return found, errors.Join(errs...)
}

// CheckSlots reports on the host's uid slots (see SlotDir): how many live
// jaild processes hold, how many a dead one left for a sweep, and every
// slot file that holds no record, which no sweep clears.
func CheckSlots() Finding {
	return checkSlots(SlotDir)
}

func checkSlots(dir string) Finding {
	f := Finding{Name: "uid slots"}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		f.OK, f.Detail = true, "none in use"
		return f
	}
	if err != nil {
		f.Detail = err.Error()
		return f
	}
	var live, orphans int
	var torn []string
	for _, e := range entries {
		n, ok := slotNumber(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(dir, e.Name())
		file, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue // released meanwhile
		}
		// A shared lock fails only under an owner's exclusive one; taken,
		// it makes a concurrent acquireSlot pass this slot by, no more.
		if err := unix.Flock(int(file.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			file.Close()
			live++
			continue
		}
		data, _ := io.ReadAll(file)
		file.Close()
		if len(data) == 0 {
			continue
		}
		if _, err := parseRecord(data); err != nil {
			torn = append(torn, (&tornError{path: p, n: n, head: data, err: err}).Error())
			continue
		}
		orphans++
	}
	f.OK = len(torn) == 0
	f.Detail = fmt.Sprintf("%d held by live jaild processes, %d left by dead ones (the next sweep tears them down)", live, orphans)
	if len(torn) > 0 {
		f.Detail += "; " + strings.Join(torn, "; ")
	}
	return f
}
