package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
)

// A client process keeps its keys.Caller, and with it its process and
// session keyrings, for as long as the process exists, as the kernel
// keeps them in the task's credentials: not only while it has a
// connection open. So a session started by `ukeyctl session` stays alive
// while that process (or any other that joined the session) lives, and a
// child that connects later with the session token still finds it.
//
// The daemon cannot see a process that never connects (a child that
// inherits the token but has not spoken yet): the session is held by the
// processes that did.

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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64) // field 9: the task's flags
	const pfExiting = 0x4                         // PF_EXITING
	return err == nil && flags&pfExiting != 0
}

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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name may hold spaces and parentheses: count fields from
	// after the last ')', where field 3 (state) begins.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// proc is a client process and its caller.
type proc struct {
	caller   *keys.Caller
	handle   procHandle
	uid      uint32
	conns    int
	awaiting bool // awaitExit runs for it
	tracked  bool // counted in the server's usage (admitProc)
	private  bool // a caller whose pid the daemon cannot see: one connection's
}

// dropProcLocked forgets p: it leaves the table of processes (if still
// there) and its uid's count. The caller ends it (p.end) once s.mu is
// released. s.mu is held.
func (s *Server) dropProcLocked(p *proc) {
	if !p.tracked {
		return
	}
	p.tracked = false
	if !p.private && s.procs[p.handle.pid] == p {
		delete(s.procs, p.handle.pid)
	}
	s.dropProc(p.uid)
}

// linger keeps a process that has closed its last connection, until it
// exits. s.mu is held.
func (s *Server) linger(p *proc) {
	if s.closing {
		return
	}
	if p.handle.file != nil {
		if !p.awaiting {
			p.awaiting = true
			s.watchers.Add(1)
			go s.awaitExit(p, p.handle.file)
		}
		return
	}
	if !s.watching {
		s.watching = true
		s.watchers.Add(1)
		go s.reapProcs()
	}
}

// awaitExit waits, parked on the runtime's poller, until p's process
// exits (its pidfd turns readable) or the pidfd is closed, and releases
// its keyrings if it has no connection then; otherwise its last close
// will.
func (s *Server) awaitExit(p *proc, f *os.File) {
	defer s.watchers.Done()
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	if raw.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) }) != nil {
		return // closed: the proc was ended
	}
	s.mu.Lock()
	p.awaiting = false
	pid := p.handle.pid
	ended := s.procs[pid] == p && p.conns == 0
	if ended {
		s.dropProcLocked(p)
		s.pruneTokens()
	}
	s.mu.Unlock()
	if ended {
		p.end()
	}
}

// reapProcs checks, every ProcessPoll, whether the processes without a
// connection and without a pidfd still exist, and releases the keyrings
// of those that do not. It ends when no such process is left, or at
// Shutdown.
func (s *Server) reapProcs() {
	defer s.watchers.Done()
	t := time.NewTicker(s.cfg.ProcessPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		var gone []*proc
		lingering := 0
		for _, p := range s.procs {
			if p.conns > 0 || p.handle.file != nil {
				continue
			}
			if p.handle.exited() {
				s.dropProcLocked(p)
				gone = append(gone, p)
			} else {
				lingering++
			}
		}
		if len(gone) > 0 {
			s.pruneTokens()
		}
		if lingering == 0 {
			s.watching = false
		}
		s.mu.Unlock()
		for _, p := range gone {
			p.end()
		}
		if lingering == 0 {
			return
		}
	}
}

// end releases a process's keyrings, as its exit does in the kernel.
func (p *proc) end() {
	p.handle.close()
	p.caller.Release()
}

// pruneTokens forgets the session tokens of sessions that no client
// process holds any more: with every process that joined it gone, the
// session is over. s.mu is held.
func (s *Server) pruneTokens() {
	held := make(map[*keys.Key]bool, len(s.procs))
	for _, p := range s.procs {
		if k := p.caller.Session(); k != nil {
			held[k] = true
		}
	}
	for t, g := range s.sessions {
		if !held[g.key] {
			delete(s.sessions, t)
			delete(s.grants, g)
		}
	}
}
