//go:build !linux

package process

import (
	"errors"
	"syscall"
)

// Pidfd returns -1: there are pidfds on Linux only.
func (h *Handle) Pidfd() int { return -1 }

// Adopt refuses: there are pidfds on Linux only. It closes fd.
func Adopt(fd int) (Handle, error) {
	syscall.Close(fd)
	return Handle{}, errors.New("no pidfds here")
}
