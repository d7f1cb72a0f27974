package jail_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
)

// filterOfRun runs a command that waits on its stdin through run, reads
// the seccomp filter of the command's process from the host, and lets it
// end.
func filterOfRun(t *testing.T, run func(*jail.Spec) (*box.Result, error), dir string) ([]unix.SockFilter, uint32) {
	t.Helper()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	mark := fmt.Sprintf("filter-probe-%d-%d", os.Getpid(), time.Now().UnixNano())
	done := make(chan error, 1)
	go func() {
		res, err := run(&jail.Spec{Command: box.Command{
			// The filter is read from the inner shell: the init is the
			// test process's child, whose ptrace stop its wait would take.
			Args:  []string{"/bin/sh", "-c", "/bin/sh -c 'read x; exit 0 # " + mark + "'; exit $?"},
			Dir:   dir,
			Stdin: stdinR, Timeout: time.Minute,
		}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		done <- err
	}()
	var pid int
	waitFor(t, 20*time.Second, "the command to start", func() bool {
		pid = findProc(mark)
		return pid != 0
	})
	// The shell is asleep in its read once /proc shows it waiting.
	waitFor(t, 10*time.Second, "the command to wait on its stdin", func() bool {
		st, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		return strings.Contains(string(st), ") S ")
	})
	insns, flags, err := jail.ReadFilter(pid)
	if err != nil {
		t.Fatal(err)
	}
	stdinW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return insns, flags
}

// findProc is the pid of a process whose command line holds mark and that
// is not a child of this one, or 0.
func findProc(mark string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmdline), mark) || strings.Contains(string(cmdline), "-test.") {
			continue
		}
		status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if !strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
			return pid
		}
	}
	return 0
}

// TestPooledFilterIsFreshFilter: a waiting sandbox's init loads exactly the
// filter that libcontainer loads in a fresh sandbox's init (the same
// instructions and flags, read from the commands' processes), both with the
// probe's program and where the probe is skipped.
func TestPooledFilterIsFreshFilter(t *testing.T) {
	for _, probe := range []bool{true, false} {
		t.Run(fmt.Sprintf("probe=%v", probe), func(t *testing.T) {
			m := newManager(t)
			if !probe {
				jail.SkipFilterProbe(m)
			}
			if got := jail.WaitingFilter(m); got != probe {
				t.Fatalf("waiting sandboxes load their own filter: %v, want %v", got, probe)
			}
			p, err := m.NewPool(1, box.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			waitReady(t, p)
			hits, _ := p.Stats()
			pooled, pflags := filterOfRun(t, func(s *jail.Spec) (*box.Result, error) { return p.Run(context.Background(), s) }, "")
			if h, _ := p.Stats(); h == hits {
				t.Fatal("no pooled sandbox served the run")
			}
			// A working directory the pool does not serve: a fresh sandbox.
			fresh, fflags := filterOfRun(t, func(s *jail.Spec) (*box.Result, error) { return m.Run(context.Background(), s) }, "/work/cold")
			if len(fresh) < 100 {
				t.Fatalf("the fresh sandbox's filter has %d instructions", len(fresh))
			}
			if !slices.Equal(pooled, fresh) || pflags != fflags {
				t.Fatalf("filters differ: pooled %d instructions, flags %#x; fresh %d, flags %#x", len(pooled), pflags, len(fresh), fflags)
			}
		})
	}
}

// TestWaitingInitRefusesBadFilter: a waiting sandbox's init that reads no
// loadable filter never runs the command.
func TestWaitingInitRefusesBadFilter(t *testing.T) {
	header := func(flags, count uint32) []byte {
		return binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, flags), count)
	}
	tests := []struct {
		name  string
		frame func([]byte) []byte
	}{
		{"no instructions", func([]byte) []byte { return header(0, 0) }},
		{"too many instructions", func([]byte) []byte { return header(0, unix.BPF_MAXINSNS+1) }},
		{"TSYNC flag", func(f []byte) []byte {
			return append(header(unix.SECCOMP_FILTER_FLAG_TSYNC, binary.NativeEndian.Uint32(f[4:])), f[8:]...)
		}},
		{"cut short", func(f []byte) []byte { return f[:len(f)/2] }},
		{"invalid program", func([]byte) []byte {
			// One instruction with an opcode BPF does not have.
			return append(header(0, 1), 0xff, 0xff, 0, 0, 0, 0, 0, 0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t)
			jail.SetFilterFrameHook(m, tt.frame)
			p, err := m.NewPool(1, box.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			waitReady(t, p)
			res, err := p.Run(context.Background(), sh("echo ran"))
			if err == nil && res.ExitCode == 0 {
				t.Fatalf("the command ran: %+v", res)
			}
			if res != nil && strings.Contains(res.Stdout, "ran") {
				t.Fatalf("the command ran: %+v", res)
			}
			t.Logf("refused: %v %+v", err, res)
		})
	}
}

// TestDoctorSeesTheProbe: doctor says whether waiting sandboxes load the
// filter compiled once; on the hosts jaild is tested on, they do.
func TestDoctorSeesTheProbe(t *testing.T) {
	requireHost(t)
	for _, f := range jail.Check() {
		if f.Name == "seccomp probe" {
			if !f.OK {
				t.Fatalf("doctor: %+v", f)
			}
			return
		}
	}
	t.Fatal("doctor has no finding on the seccomp probe")
}
