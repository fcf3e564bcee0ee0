package client

import "golang.org/x/sys/unix"

// peerUID is the effective uid of the process that made the listening
// socket fd is connected to, as the kernel recorded it (SO_PEERCRED).
func peerUID(fd int) (uint32, error) {
	uc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, err
	}
	return uc.Uid, nil
}
