//go:build !darwin

package main

import "syscall"

// socketCloexec is socket(2) with the descriptor closed on exec from the
// start, so that no program ukeyctl starts inherits it.
func socketCloexec(domain, typ int) (int, error) {
	return syscall.Socket(domain, typ|syscall.SOCK_CLOEXEC, 0)
}

// socketpairCloexec is socketpair(2) with both ends closed on exec.
func socketpairCloexec(domain, typ int) ([2]int, error) {
	return syscall.Socketpair(domain, typ|syscall.SOCK_CLOEXEC, 0)
}
