//go:build !linux

package sock

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// RecvFlags: no MSG_CMSG_CLOEXEC here; whoever receives descriptors sets
// close-on-exec on them itself (keep does).
const RecvFlags = 0

// Socket makes a Unix stream socket, close-on-exec (under the fork lock,
// as the os package does where sockets cannot be made so at once).
func Socket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	return fd, err
}
