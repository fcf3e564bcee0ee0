//go:build !linux

package server

import "testing"

// procTreeTestable reports whether procStat can read processes here.
func procTreeTestable() bool { return procTreeSupported }

// pidHandle identifies pid as openProc does for a connection.
func pidHandle(t *testing.T, pid int) *procHandle {
	t.Helper()
	h := openProc(nil, pid)
	t.Cleanup(h.close)
	return &h
}
