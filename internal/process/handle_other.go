//go:build !linux && !darwin && !freebsd

package process

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// Handle tells whether a process still exists, on a system without
// pidfds, /proc or kqueue's EVFILT_PROC support here: by its pid alone
// (kill(pid, 0)), which cannot tell a reused pid from the process. The
// daemon checks it every ProcessPoll (reapProcs).
type Handle struct {
	pid  int
	file *os.File // always nil: nothing to wait for on the poller
}

// Pinned: a handle here holds no descriptor of its process.
func (h *Handle) Pinned() bool { return false }

// IsPeer: a handle here is opened by pid, which a process that exited
// and whose pid was reused since it connected could have given another.
func (h *Handle) IsPeer() bool { return false }

func Open(_ *net.UnixConn, pid int) Handle { return Handle{pid: pid} }

func (h *Handle) Exited() bool {
	if h.pid <= 0 {
		return false // a process of its own per connection: its connection tells
	}
	return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
}

func (h *Handle) ExitPolled(int) bool { return h.Exited() }

func (h *Handle) Leaving() bool { return h.Exited() }

// OpenPID: a process that has not connected cannot be followed here, so
// session_to_parent reaches only a parent that is a client.
func OpenPID(pid int, start string) (Handle, bool) { return Handle{}, false }

// Capabilities: this system has no capability sets that the daemon can
// read, so privilege is uid 0's (keys.Cred.Capable).
func (h *Handle) Capabilities(uint32) (uint64, bool) { return 0, false }

// OwnCapabilities: none to tell here; the uid decides.
func OwnCapabilities() (uint64, bool) { return 0, false }

func (h *Handle) Close() {}

// OwnView: there is no /proc to doubt here.
func OwnView() bool { return true }

// PeerReaped: no pidfds here (see [Open]).
func PeerReaped(*net.UnixConn) bool { return false }

// RuntimeCapabilities: no capabilities to read here (see
// [Handle.Capabilities]), and a reaped runtime cannot be told.
func (h *Handle) RuntimeCapabilities(euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.Capabilities(euid)
	return caps, known, false
}
