//go:build !linux && !darwin && !freebsd

package server

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// procHandle tells whether a process still exists, on a system without
// pidfds, /proc or kqueue's EVFILT_PROC support here: by its pid alone
// (kill(pid, 0)), which cannot tell a reused pid from the process. The
// daemon checks it every ProcessPoll (reapProcs).
type procHandle struct {
	pid  int
	fd   int      // always -1
	file *os.File // always nil: nothing to wait for on the poller
}

// isPeer: a handle here is opened by pid, which a process that exited
// and whose pid was reused since it connected could have given another.
func (h *procHandle) isPeer() bool { return false }

func openProc(_ *net.UnixConn, pid int) procHandle { return procHandle{pid: pid, fd: -1} }

func (h *procHandle) exited() bool {
	if h.pid <= 0 {
		return false // a process of its own per connection: its connection tells
	}
	return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
}

func (h *procHandle) exitPolled(int) bool { return h.exited() }

func (h *procHandle) leaving() bool { return h.exited() }

// openPid: a process that has not connected cannot be followed here, so
// session_to_parent reaches only a parent that is a client.
func openPid(pid int, start string) (procHandle, bool) { return procHandle{fd: -1}, false }

// capabilities: this system has no capability sets that the daemon can
// read, so privilege is uid 0's (keys.Cred.Capable).
func (h *procHandle) capabilities(uint32) (uint64, bool) { return 0, false }

// ownCapabilities: none to tell here; the uid decides.
func ownCapabilities() (uint64, bool) { return 0, false }

func (h *procHandle) close() {}

// checkProc: there is no /proc to doubt here.
func (s *Server) checkProc() {}
