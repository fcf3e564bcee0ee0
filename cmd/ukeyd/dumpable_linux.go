package main

import "golang.org/x/sys/unix"

// noDumps keeps this process's memory, which holds every payload, out of
// core dumps and away from ptrace and /proc/<pid>/mem of other processes
// of the same user (PR_SET_DUMPABLE 0).
func noDumps() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
