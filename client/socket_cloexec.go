//go:build !darwin

package client

import "syscall"

// unixSocket returns a new Unix stream socket, closed on exec from the
// start (SOCK_CLOEXEC), so that a program that starts another while a
// client dials does not hand the daemon's connection to it.
func unixSocket() (int, error) {
	return syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
