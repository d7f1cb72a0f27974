// Package fdpass reads the descriptors passed with a unix socket message
// (SCM_RIGHTS), for the processes of one jaild that hand each other open
// files: the front end and its worker, the daemon and its file writers.
package fdpass

import "golang.org/x/sys/unix"

// Parse returns the descriptors in a message's control data oob. On an
// error it returns those parsed so far, which the caller now owns and must
// close.
func Parse(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
