package api

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestLinuxSignalsMatchTheKernel: the table that turns a signal name into an
// exit status 128+N has Linux's numbers, all 31 of them.
func TestLinuxSignalsMatchTheKernel(t *testing.T) {
	for n, v := range linuxSignals {
		if int(unix.SignalNum(n)) != v {
			t.Errorf("%s: %d vs %d", n, v, unix.SignalNum(n))
		}
	}
	for i := 1; i < 32; i++ {
		if linuxSignals[unix.SignalName(unix.Signal(i))] != i {
			t.Errorf("signal %d (%s) missing", i, unix.SignalName(unix.Signal(i)))
		}
	}
}
