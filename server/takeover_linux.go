package server

import "golang.org/x/sys/unix"

// handoverSocket makes the hand-over connection's socket, close-on-exec
// from the start.
func handoverSocket() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}

// handoverRecvFlags makes the descriptors received close-on-exec as they
// arrive.
const handoverRecvFlags = unix.MSG_CMSG_CLOEXEC
