package client

import "syscall"

// unixSocket returns a new Unix stream socket, closed on exec. macOS has
// no SOCK_CLOEXEC: the flag is set after socket(2), and ForkLock (which
// the os/exec and syscall fork paths take for writing) keeps a process
// started from another goroutine from inheriting the socket in between,
// as the net package does there.
func unixSocket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}
