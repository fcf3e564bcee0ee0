//go:build darwin || freebsd

package process

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handle tells whether one particular process still exists. These
// kernels have no pidfd and no /proc, but kqueue's EVFILT_PROC with
// NOTE_EXIT is their equivalent: the registration follows the process, not
// its pid, so a pid reused after the exit cannot pass for it. Registered
// by pid when the process connects, it shares the one window the Linux
// fallback (pidfd_open by pid) has: a process that exits, and whose pid
// is reused, between its connect and the accept. The kqueue descriptor
// itself turns readable when the exit is queued, so the daemon waits for
// it on the runtime's poller (awaitExit) where the poller accepts it, and
// checks it every ProcessPoll (reapProcs) where it does not.
//
// Where the kqueue cannot be set up the handle falls back to kill(pid, 0),
// which cannot tell a reused pid from the process.
//
// The zero Handle names no process: it holds nothing, and its process
// never exits.
type Handle struct {
	pid    int
	fd     int          // kqueue watching the process's exit, if pinned
	pinned bool         // fd is open
	file   *os.File     // fd, registered with the poller; nil if it is not
	own    *os.File     // fd, which Close closes; nil unless pinned
	gone   *atomic.Bool // the exit was seen; the kqueue reports it only once
}

// IsPeer: a handle here is opened by pid, which a process that exited
// and whose pid was reused since it connected could have given another.
func (h *Handle) IsPeer() bool { return false }

// Open identifies the process whose pid the kernel reported as pid
// for a connection (LOCAL_PEERPID, or the xucred's cr_pid).
func Open(_ *net.UnixConn, pid int) Handle {
	h := Handle{pid: pid, gone: new(atomic.Bool)}
	kq, err := unix.Kqueue()
	if err != nil {
		return h
	}
	// A kqueue is not inherited across fork at all; close-on-exec too, for
	// good measure.
	unix.CloseOnExec(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD)
	ev.Fflags = unix.NOTE_EXIT
	if _, err := keventRetry(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		unix.Close(kq)
		// ESRCH: the process has gone already, unless the kernel hides it
		// from the daemon (FreeBSD's security.bsd.see_other_uids=0 answers
		// ESRCH for a process of another uid): kill(pid, 0) answers EPERM
		// for a hidden one. Otherwise the fallback applies.
		if errors.Is(err, unix.ESRCH) && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			h.gone.Store(true)
		}
		return h
	}
	h.fd, h.pinned = kq, true
	if err := unix.SetNonblock(kq, true); err == nil {
		h.own = os.NewFile(uintptr(kq), "kqueue")
		// The poller may refuse a kqueue (it then serves the file as a
		// blocking one): only a file that takes a deadline is on it.
		if h.own.SetReadDeadline(time.Time{}) == nil {
			h.file = h.own
		}
	}
	return h
}

// Exited reports whether the process is gone.
func (h *Handle) Exited() bool {
	if h.gone != nil && h.gone.Load() {
		return true
	}
	if h.pinned {
		return h.ExitPolled(h.fd)
	}
	if h.pid <= 0 {
		return false // a process of its own per connection: its connection tells
	}
	// Without the kqueue: whether the pid exists (pid reuse cannot be
	// told apart here).
	return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
}

// ExitPolled reports whether the kqueue fd, h's, has queued the process's
// exit, and remembers it.
func (h *Handle) ExitPolled(fd int) bool {
	if h.gone.Load() {
		return true
	}
	var evs [1]unix.Kevent_t
	n, err := keventRetry(fd, nil, evs[:], &unix.Timespec{}) // no wait
	if err != nil || n == 0 || evs[0].Fflags&unix.NOTE_EXIT == 0 {
		return false
	}
	h.gone.Store(true)
	return true
}

// Leaving reports whether the process has exited or is exiting. Linux
// tells a process on its way out (PF_EXITING) from /proc; here only the
// exit itself is seen, which kqueue queues as soon as the process has
// finished exiting, right after it closed its last connection: awaitExit
// releases its keyrings then.
func (h *Handle) Leaving() bool { return h.Exited() }

// OpenPID: a process that has not connected cannot be followed here, so
// session_to_parent reaches only a parent that is a client.
func OpenPID(pid int, start string) (Handle, bool) { return Handle{}, false }

// Capabilities: this system has no capability sets that the daemon can
// read, so privilege is uid 0's (keys.Cred.Capable).
func (h *Handle) Capabilities(uint32) (uint64, bool) { return 0, false }

// OwnCapabilities: none to tell here; the uid decides.
func OwnCapabilities() (uint64, bool) { return 0, false }

func (h *Handle) Close() {
	switch {
	case h.own != nil:
		h.own.Close()
	case h.pinned:
		unix.Close(h.fd)
	}
	h.file, h.own, h.fd, h.pinned = nil, nil, -1, false
}

// keventRetry is kevent(2), again when a signal interrupts it.
func keventRetry(kq int, changes, events []unix.Kevent_t, timeout *unix.Timespec) (int, error) {
	for {
		n, err := unix.Kevent(kq, changes, events, timeout)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// Pinned reports whether h holds a kqueue that watches the process's
// exit, which follows the process and not its pid.
func (h *Handle) Pinned() bool { return h.pinned }

// OwnView: the BSDs' process table comes from sysctl and kqueue, in the
// daemon's own view.
func OwnView() bool { return true }

// PeerReaped: no pidfds here (see [Open]).
func PeerReaped(*net.UnixConn) bool { return false }

// RuntimeCapabilities: no capabilities to read here (see
// [Handle.Capabilities]), and a reaped runtime cannot be told.
func (h *Handle) RuntimeCapabilities(euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.Capabilities(euid)
	return caps, known, false
}
