package server

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// procTreeTestable reports whether procStat can read processes here.
func procTreeTestable() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// pidHandle identifies pid as openProc does for a connection.
func pidHandle(t *testing.T, pid int) *procHandle {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return &procHandle{pid: pid, fd: -1, start: startTime(pid)}
	}
	h := &procHandle{pid: pid, fd: fd}
	t.Cleanup(h.close)
	return h
}
