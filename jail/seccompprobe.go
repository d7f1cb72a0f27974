package jail

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

// A waiting sandbox's init (pool-wait) loads the sandbox's seccomp filter
// itself, from a program the Manager compiled once, instead of libcontainer
// compiling the profile with libseccomp in every init. On vm2 that compile
// and the JSON of the profile's rules (most of an init's config) were about
// a fifth of a sandbox init's CPU.
//
// The program is libcontainer's own, not a second compiler's: a
// short-lived helper (this binary re-executed as "seccomp-probe") loads
// the profile with libcontainer's seccomp.InitSeccomp, exactly as a
// sandbox's init does, and the Manager reads the loaded filter back from
// the kernel with ptrace (PTRACE_SECCOMP_GET_FILTER, as CRIU does). So
// runc's ENOSYS stub, the architectures and libseccomp's rule order are
// those of a fresh sandbox; TestPooledFilterIsFreshFilter compares the two
// filters instruction by instruction.
//
// Where the filter cannot be read back (a kernel without
// CONFIG_CHECKPOINT_RESTORE, jaild itself under a seccomp filter, ptrace
// closed by a security module), waiting sandboxes keep the profile in
// libcontainer's config, as fresh sandboxes always do, and the Manager logs
// why once.

// SeccompProbeArg is os.Args[1] of the helper that loads the profile for
// the Manager to read back (see above); [MaybeWatchdog] dispatches it.
const SeccompProbeArg = "seccomp-probe"

// seccompProgram is a loaded filter as the kernel returns it: classic BPF,
// and the flags it was loaded with.
type seccompProgram struct {
	flags uint32
	insns []unix.SockFilter
}

// frame is the program as pool-wait reads it from fd 3 before its command
// (see internal/inithook/poolwait.c): the flags and the instruction count
// as two native-endian uint32, then the instructions as struct
// sock_filter.
func (p *seccompProgram) frame() []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.NativeEndian, [2]uint32{p.flags, uint32(len(p.insns))})
	_ = binary.Write(&b, binary.NativeEndian, p.insns)
	return b.Bytes()
}

// The flags pool-wait accepts (poolwait.c refuses others): those
// PTRACE_SECCOMP_GET_METADATA reports and a profile of jaild's could set.
const seccompFrameFlags = unix.SECCOMP_FILTER_FLAG_LOG | unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW

// runSeccompProbe is the helper: it loads the profile on its main thread
// as a sandbox's init would, says which thread on stdout, and waits for
// stdin to end, while the Manager reads the filter. It never returns.
func runSeccompProbe() {
	runtime.LockOSThread()
	fail := func(err error) {
		fmt.Fprintln(os.Stdout, "error:", err)
		os.Exit(1)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(fmt.Errorf("no_new_privs: %w", err))
	}
	if _, err := seccomp.InitSeccomp(seccompProfile()); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stdout, "%d\n", unix.Gettid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// probeTimeout bounds the helper's start and load.
const probeTimeout = 10 * time.Second

// probeSeccomp compiles the sandbox profile once (see above): it starts
// the helper, reads the filter it loaded, and ends it.
func probeSeccomp() (_ *seccompProgram, retErr error) {
	if !dispatching.Load() {
		return nil, errNoDispatch
	}
	cmd := exec.Command("/proc/self/exe", SeccompProbeArg)
	cmd.Env = []string{"GOMAXPROCS=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout = stdoutW
	stdin, err := cmd.StdinPipe()
	if err != nil {
		stdoutW.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil { // Start closes the stdin pipe
		stdoutW.Close()
		return nil, fmt.Errorf("start seccomp probe: %w", err)
	}
	stdoutW.Close()
	defer func() {
		stdin.Close() // the helper exits
		if retErr != nil {
			_ = cmd.Process.Kill() // whatever it is doing: the probe has failed
		}
		if err := cmd.Wait(); err != nil && retErr == nil {
			retErr = fmt.Errorf("seccomp probe: %w (%s)", err, strings.TrimSpace(stderr.String()))
		}
	}()
	_ = out.SetReadDeadline(time.Now().Add(probeTimeout))
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("seccomp probe: %w (%s)", err, strings.TrimSpace(stderr.String()))
	}
	line = strings.TrimSpace(line)
	tid, err := strconv.Atoi(line)
	if err != nil || tid <= 0 {
		return nil, fmt.Errorf("seccomp probe: %s", line)
	}
	return readFilter(tid)
}

// readFilter reads the newest seccomp filter of thread tid, which must not
// be running anything but a wait: it attaches, stops the thread, reads, and
// detaches. ptrace wants every request from the thread that attached.
func readFilter(tid int) (*seccompProgram, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, fmt.Errorf("ptrace seize: %w", err)
	}
	defer func() { _ = unix.PtraceDetach(tid) }()
	if err := unix.PtraceInterrupt(tid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt: %w", err)
	}
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wait for the probe to stop: %w", err)
		}
		if !ws.Stopped() {
			return nil, fmt.Errorf("the seccomp probe ended: %v", ws)
		}
		break
	}
	n, err := ptraceSeccomp(unix.PTRACE_SECCOMP_GET_FILTER, tid, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("read the probe's filter: %w", err)
	}
	if n <= 0 || n > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("read the probe's filter: %d instructions", n)
	}
	insns := make([]unix.SockFilter, n)
	if _, err := ptraceSeccomp(unix.PTRACE_SECCOMP_GET_FILTER, tid, 0, unsafe.Pointer(&insns[0])); err != nil {
		return nil, fmt.Errorf("read the probe's filter: %w", err)
	}
	// struct seccomp_metadata: the filter's index in, its flags out.
	var md [2]uint64
	if _, err := ptraceSeccomp(unix.PTRACE_SECCOMP_GET_METADATA, tid, unsafe.Sizeof(md), unsafe.Pointer(&md)); err != nil {
		return nil, fmt.Errorf("read the probe's filter flags: %w", err)
	}
	if md[1]&^seccompFrameFlags != 0 {
		return nil, fmt.Errorf("the probe's filter has flags %#x pool-wait does not set", md[1])
	}
	return &seccompProgram{flags: uint32(md[1]), insns: insns}, nil
}

func ptraceSeccomp(req, tid int, addr uintptr, data unsafe.Pointer) (int, error) {
	r, _, errno := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}
