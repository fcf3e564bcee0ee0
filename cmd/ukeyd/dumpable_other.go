//go:build !linux

package main

import "syscall"

// noDumps keeps this process's memory, which holds every payload, out of
// core dumps (RLIMIT_CORE 0, soft and hard). These systems have no
// PR_SET_DUMPABLE: whether a debugger of the same user may still attach
// is left to the system (macOS's hardened runtime and SIP, FreeBSD's
// security.bsd.unprivileged_proc_debug).
func noDumps() error {
	return syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
}
