package main

import "syscall"

// socketCloexec is socket(2) with the descriptor closed on exec. macOS has
// no SOCK_CLOEXEC: the flag is set afterwards, under ForkLock, so that a
// program started from another goroutine meanwhile does not inherit it.
func socketCloexec(domain, typ int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(domain, typ, 0)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}

// socketpairCloexec is socketpair(2) with both ends closed on exec (see
// socketCloexec).
func socketpairCloexec(domain, typ int) ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(domain, typ, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
