//go:build darwin || freebsd

package client

import "golang.org/x/sys/unix"

// peerUID is the effective uid of the process that made the listening
// socket fd is connected to, as the kernel recorded it (LOCAL_PEERCRED).
func peerUID(fd int) (uint32, error) {
	xc, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return 0, err
	}
	return xc.Uid, nil
}
