//go:build darwin || freebsd

package server

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// procHandle tells whether one particular process still exists. These
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
type procHandle struct {
	pid  int
	fd   int          // kqueue watching the process's exit, or -1
	file *os.File     // fd, registered with the poller; nil if it is not
	own  *os.File     // fd, which close closes; nil with fd -1
	gone *atomic.Bool // the exit was seen; the kqueue reports it only once
}

// isPeer: a handle here is opened by pid, which a process that exited
// and whose pid was reused since it connected could have given another.
func (h *procHandle) isPeer() bool { return false }

// openProc identifies the process whose pid the kernel reported as pid
// for a connection (LOCAL_PEERPID, or the xucred's cr_pid).
func openProc(_ *net.UnixConn, pid int) procHandle {
	h := procHandle{pid: pid, fd: -1, gone: new(atomic.Bool)}
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
	h.fd = kq
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

// exited reports whether the process is gone.
func (h *procHandle) exited() bool {
	if h.gone != nil && h.gone.Load() {
		return true
	}
	if h.fd >= 0 {
		return h.exitPolled(h.fd)
	}
	if h.pid <= 0 {
		return false // a process of its own per connection: its connection tells
	}
	// Without the kqueue: whether the pid exists (pid reuse cannot be
	// told apart here).
	return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
}

// exitPolled reports whether the kqueue fd, h's, has queued the process's
// exit, and remembers it.
func (h *procHandle) exitPolled(fd int) bool {
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

// leaving reports whether the process has exited or is exiting. Linux
// tells a process on its way out (PF_EXITING) from /proc; here only the
// exit itself is seen, which kqueue queues as soon as the process has
// finished exiting, right after it closed its last connection: awaitExit
// releases its keyrings then.
func (h *procHandle) leaving() bool { return h.exited() }

// openPid: a process that has not connected cannot be followed here, so
// session_to_parent reaches only a parent that is a client.
func openPid(pid int, start string) (procHandle, bool) { return procHandle{fd: -1}, false }

// capabilities: this system has no capability sets that the daemon can
// read, so privilege is uid 0's (keys.Cred.Capable).
func (h *procHandle) capabilities(uint32) (uint64, bool) { return 0, false }

// ownCapabilities: none to tell here; the uid decides.
func ownCapabilities() (uint64, bool) { return 0, false }

func (h *procHandle) close() {
	switch {
	case h.own != nil:
		h.own.Close()
	case h.fd >= 0:
		unix.Close(h.fd)
	}
	h.file, h.own, h.fd = nil, nil, -1
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

// checkProc: the BSDs' process table comes from sysctl and kqueue, in
// the daemon's own view.
func (s *Server) checkProc() {}
