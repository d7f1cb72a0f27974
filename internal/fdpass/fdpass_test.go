package fdpass

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	if err := unix.Sendmsg(pair[0], []byte("x"), unix.UnixRights(int(r.Fd()), int(w.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(2*4))
	_, oobn, _, _, err := unix.Recvmsg(pair[1], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := Parse(oob[:oobn])
	if err != nil || len(fds) != 2 {
		t.Fatalf("Parse: %v, %v", fds, err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	// Control data too short for a header holds no descriptor.
	if fds, _ := Parse([]byte{1, 2, 3}); len(fds) != 0 {
		t.Errorf("Parse of a short buffer: %v", fds)
	}
}
