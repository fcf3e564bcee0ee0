//go:build !linux

package server

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// handoverSocket makes the hand-over connection's socket, close-on-exec
// (under the fork lock, as the os package does where sockets cannot be
// made so at once).
func handoverSocket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	return fd, err
}

// handoverRecvFlags: the descriptors received are made close-on-exec
// once received (receiveFDs).
const handoverRecvFlags = 0
