package process

import (
	"errors"
	"math"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
)

// Handle tells whether one particular process still exists, immune to
// its pid being reused: a pidfd where the kernel has them (taken from the
// socket itself with SO_PEERPIDFD, or opened by pid), else the process's
// start time from /proc. A pidfd also lets the daemon wait for the exit
// through the runtime's poller (awaitExit), so keyrings go as soon as
// their process does.
//
// The zero Handle names no process: it holds nothing, and its process
// never exits.
type Handle struct {
	pid    int
	fd     int      // pidfd, if pinned
	pinned bool     // fd is open
	file   *os.File // fd, registered with the poller
	start  string   // /proc/<pid>/stat start time, without a pidfd
	peer   bool     // fd came from the socket (SO_PEERPIDFD): the peer's own
}

// IsPeer reports whether h was taken from the connection itself, and so
// is the connecting process's and no other's, whatever became of its pid.
func (h *Handle) IsPeer() bool { return h.peer }

// Open identifies the process at the other end of uc, whose pid the
// kernel reported as pid. Without a connection (uc nil) it identifies
// pid as a connection's fallback does.
func Open(uc *net.UnixConn, pid int) Handle {
	h := Handle{pid: pid}
	if uc != nil {
		if raw, err := uc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				if pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
					h.fd, h.pinned, h.peer = pfd, true, true
				}
			})
		}
	}
	if !h.pinned {
		if pfd, err := unix.PidfdOpen(pid, 0); err == nil {
			h.fd, h.pinned = pfd, true
		}
	}
	if h.pinned {
		unix.CloseOnExec(h.fd) // helpers the daemon starts must not inherit it
		// Non-blocking, so that os.NewFile registers it with the poller.
		if err := unix.SetNonblock(h.fd, true); err == nil {
			h.file = os.NewFile(uintptr(h.fd), "pidfd")
		}
		return h
	}
	h.start = StartTime(pid)
	return h
}

// OpenPID identifies a process that has not connected (a client's
// parent): by a pidfd, or else its start time; start is the start time
// read before, which the process must still have once the pidfd is open,
// so that the pidfd is known to be that process's and not a later one's.
func OpenPID(pid int, start string) (Handle, bool) {
	if pid <= 0 || pid > math.MaxInt32 {
		// Not a pid_t: pidfd_open would open the pid it truncates to.
		return Handle{}, false
	}
	h := Handle{pid: pid}
	if pfd, err := unix.PidfdOpen(pid, 0); err == nil {
		h.fd, h.pinned = pfd, true
		unix.CloseOnExec(h.fd)
		if err := unix.SetNonblock(h.fd, true); err == nil {
			h.file = os.NewFile(uintptr(h.fd), "pidfd")
		}
	} else {
		h.start = start
	}
	if StartTime(pid) != start {
		h.Close()
		return Handle{}, false
	}
	return h, true
}

// Exited reports whether the process is gone. A pidfd polls readable once
// its process has exited.
func (h *Handle) Exited() bool {
	if h.pinned {
		return pidfdReadable(h.fd)
	}
	if h.start == "" {
		// Neither a pidfd nor /proc: ask the kernel whether the pid exists
		// (pid reuse cannot be told apart here).
		return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
	}
	return StartTime(h.pid) != h.start
}

// Leaving reports whether the process has exited. A process that exits
// closes its connections on the way out, a moment before its pidfd turns
// readable; its last close leaves it to awaitExit, which releases its
// keyrings once the pidfd says so. The kernel's PF_EXITING, set earlier,
// cannot be trusted to mean an exit: a process that calls execve from a
// thread other than its first has that first thread killed (de_thread)
// and carries on under the same pid, and for that moment its
// /proc/<pid>/stat says PF_EXITING. A Go program execs from whichever
// thread its goroutine runs on, and "ukeyctl session" closes its
// connection just before it execs, so taking the flag for an exit would
// lose the session (cmd/ukeyctl's TestSideBySide runs into it). Reading
// the flag would also wait on the exiting process's memory teardown, at a
// cost to every short-lived client.
func (h *Handle) Leaving() bool { return h.Exited() }

// Capabilities returns the process's effective capability set, asked of
// the kernel with capget(2), or else read from /proc/<pid>/status, for a
// connection made with effective uid euid. It counts only if the process
// still has that effective uid, and is in the daemon's user namespace (one
// that made a namespace of its own has every capability there, which
// capget reports as if they were the daemon's), and only if the process
// is still there once it has been read (its pid not yet another's):
// otherwise it is known to be empty. So is the set of a process that
// cannot be read at all, gone before the daemon met it: leaving it
// unknown would make a uid-0 caller privileged by default, and a root
// process stripped of its capabilities (a container's root) would gain
// them all by connecting and exiting before accept.
//
// capget answers in a system call what the status file makes the kernel
// print in full and the daemon parse (about a fifth of the daemon's work
// on meeting a short-lived client such as ukeyctl): the status is read
// only for a process that has capabilities, to check its uid.
//
// Where /proc is not the daemon's own, no namespace can be told: the set
// is unknown, and uid 0 alone is privileged (see docs/security.md).
func (h *Handle) Capabilities(euid uint32) (uint64, bool) {
	return h.capabilitiesUnless(euid, h.Exited)
}

// capabilitiesUnless is capabilities, with gone saying, after the read,
// whether what was read may not have been the process's: for a client,
// once it has exited (Capabilities); for a runtime handing the seccomp
// agent a container, only once it has been reaped (RuntimeCapabilities).
func (h *Handle) capabilitiesUnless(euid uint32, gone func() bool) (uint64, bool) {
	if !procfs.Ours() {
		return 0, false
	}
	eff, ok := capget(h.pid)
	var st procfs.Status
	read := false
	if !ok {
		if st, read = procfs.ReadStatus(h.pid); !read {
			return 0, true
		}
		eff, ok = st.CapEff, st.HasCapEff
	}
	if eff != 0 {
		// The connection's credentials are the ones it was made with
		// (SO_PEERCRED's euid), its capabilities the process's now: a
		// process that ran a setuid-root program since it connected (su
		// waiting for a password) has root's, while a process of its own
		// holds the connection. They count only while the process's
		// effective uid is still the one it connected with.
		if !read {
			st, read = procfs.ReadStatus(h.pid)
		}
		if !read || st.UIDs[1] != euid || !procfs.InOwnUserNS(h.pid) {
			eff = 0
		}
	}
	if !ok || gone() {
		return 0, true
	}
	return eff, true
}

// OwnCapabilities returns the daemon's own effective capability set.
func OwnCapabilities() (uint64, bool) { return capget(os.Getpid()) }

// capget returns the effective capability set of the thread pid (a
// process's first thread, for a process's pid), in the caller's pid
// namespace as SO_PEERCRED reports pids.
func capget(pid int) (uint64, bool) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: int32(pid)}
	var data [2]unix.CapUserData // version 3: two 32-bit halves
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, false
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), true
}

// ExitPolled reports whether the process has exited, given h's
// descriptor as the poller hands it to awaitExit.
func (h *Handle) ExitPolled(fd int) bool { return pidfdReadable(fd) }

func pidfdReadable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

func (h *Handle) Close() {
	switch {
	case h.file != nil:
		h.file.Close()
	case h.pinned:
		unix.Close(h.fd)
	}
	h.file, h.fd, h.pinned = nil, -1, false
}

// Pinned reports whether h holds a pidfd of the process, which names it
// and no later process given its pid.
func (h *Handle) Pinned() bool { return h.pinned }

// OwnView reports whether the daemon reads processes in its own view:
// /proc must be its pid namespace's ([procfs.Ours]), or else nothing is read
// there, and a process it meets has no ancestry, capabilities (uid 0 alone
// is privileged) or login, and its intercepted calls cannot be served.
func OwnView() bool { return procfs.Ours() }

// reaped reports whether the process h is a handle of has been reaped
// (its pid may be another's since): signal 0 through a pidfd reaches an
// exited process until then. Without a pidfd its start time tells, which
// /proc shows until then too.
func (h *Handle) reaped() bool {
	if h.pinned {
		return errors.Is(unix.PidfdSendSignal(h.fd, 0, nil, 0), unix.ESRCH)
	}
	return h.Exited()
}

// PeerReaped reports whether the kernel, which could have given a
// pidfd of the peer of uc (SO_PEERPIDFD, Linux 6.5), did not because the
// peer has been reaped (before 6.16, which gives a pidfd of a reaped
// peer too): a handle the peer's pid opened since ([Open]'s fallback)
// may be a later process's with that pid, whose capabilities are not
// the runtime's.
func PeerReaped(uc *net.UnixConn) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	reaped := false
	_ = raw.Control(func(fd uintptr) {
		pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		if err == nil {
			unix.Close(pfd)
		}
		reaped = errors.Is(err, unix.ESRCH)
	})
	return reaped
}

// RuntimeCapabilities reads the capabilities of the runtime h is a
// handle of, connected with effective uid euid, as [Handle.Capabilities] does, but
// counts those of a runtime that has exited and is not yet reaped (a
// zombie: the kernel keeps its credentials, and its pid is its own,
// until its parent waits for it). A runtime may send its container and
// exit before the agent has accepted it (runc does, and under load it
// is often gone first). reaped reports one that was reaped before its
// capabilities could be read: they are then known to be empty.
func (h *Handle) RuntimeCapabilities(euid uint32) (caps uint64, known, reaped bool) {
	caps, known = h.capabilitiesUnless(euid, h.reaped)
	return caps, known, caps == 0 && h.reaped()
}
