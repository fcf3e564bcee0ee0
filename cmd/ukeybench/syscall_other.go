//go:build !linux

package main

import (
	"errors"
	"time"
)

// runSyscall: only Linux has the kernel's key system calls and seccomp
// user notification.
func runSyscall(p syscallParams, dur time.Duration, prog *progress) (report, error) {
	return report{}, errors.New("the syscall scenario needs Linux (its key system calls, seccomp user notification)")
}

func syscallChild(string) int { return 1 }
