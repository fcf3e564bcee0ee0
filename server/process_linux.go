package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// procHandle tells whether one particular process still exists, immune to
// its pid being reused: a pidfd where the kernel has them (taken from the
// socket itself with SO_PEERPIDFD, or opened by pid), else the process's
// start time from /proc. A pidfd also lets the daemon wait for the exit
// through the runtime's poller (awaitExit), so keyrings go as soon as
// their process does.
type procHandle struct {
	pid   int
	fd    int      // pidfd, or -1
	file  *os.File // fd, registered with the poller
	start string   // /proc/<pid>/stat start time, without a pidfd
}

// openProc identifies the process at the other end of uc, whose pid the
// kernel reported as pid.
func openProc(uc *net.UnixConn, pid int) procHandle {
	h := procHandle{pid: pid, fd: -1}
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			if pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				h.fd = pfd
			}
		})
	}
	if h.fd < 0 {
		if pfd, err := unix.PidfdOpen(pid, 0); err == nil {
			h.fd = pfd
		}
	}
	if h.fd >= 0 {
		unix.CloseOnExec(h.fd) // helpers the daemon starts must not inherit it
		// Non-blocking, so that os.NewFile registers it with the poller.
		if err := unix.SetNonblock(h.fd, true); err == nil {
			h.file = os.NewFile(uintptr(h.fd), "pidfd")
		}
		return h
	}
	h.start = startTime(pid)
	return h
}

// exited reports whether the process is gone. A pidfd polls readable once
// its process has exited.
func (h *procHandle) exited() bool {
	if h.fd >= 0 {
		return pidfdReadable(h.fd)
	}
	if h.start == "" {
		// Neither a pidfd nor /proc: ask the kernel whether the pid exists
		// (pid reuse cannot be told apart here).
		return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
	}
	return startTime(h.pid) != h.start
}

// leaving reports whether the process has exited or is exiting. A
// process that exits closes its connections on the way out, before it has
// finished exiting (and before its pidfd turns readable); the kernel has
// marked it PF_EXITING by then, so its last close can release its
// keyrings at once, as before processes outlived their connections.
func (h *procHandle) leaving() bool {
	if h.exited() {
		return true
	}
	// Still there, so the pid is still this process's: /proc/<pid> is it.
	return allThreadsExiting(h.pid)
}

// allThreadsExiting reports whether every thread of process pid is on
// its way out (PF_EXITING). The thread group leader's flag alone is not
// enough: a process that calls execve from a thread other than its first
// has that first thread killed (the kernel's de_thread) and carries on in
// the new program under the same pid, and in that moment the leader's
// /proc/<pid>/stat says PF_EXITING. A Go program execs from whichever
// thread its goroutine runs on, and "ukeyctl session" closes its
// connection just before it execs: the daemon must not take that for the
// end of the session's process.
func allThreadsExiting(pid int) bool {
	if st, ok := readStat(pid); !ok || st.flags&pfExiting == 0 {
		return false
	}
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone meanwhile
	}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if ts, ok := readTaskStat(pid, tid); ok && ts.flags&pfExiting == 0 {
			return false
		}
	}
	// The exec'ing thread takes the leader's place (and pid) at the end
	// of de_thread, perhaps while the threads were read: the leader's
	// stat then shows it.
	st, ok := readStat(pid)
	return !ok || st.flags&pfExiting != 0
}

// exitPolled reports whether the process has exited, given h's
// descriptor as the poller hands it to awaitExit.
func (h *procHandle) exitPolled(fd int) bool { return pidfdReadable(fd) }

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

func (h *procHandle) close() {
	switch {
	case h.file != nil:
		h.file.Close()
	case h.fd >= 0:
		unix.Close(h.fd)
	}
	h.file, h.fd = nil, -1
}

// startTime returns field 22 of /proc/<pid>/stat (the process's start
// time in clock ticks since boot), or "" if the process or /proc is not
// there.
func startTime(pid int) string {
	st, _ := readStat(pid)
	return st.start
}
