package server

import (
	"errors"
	"fmt"
	"net"
	"os"
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
// start time from /proc.
type procHandle struct {
	pid   int
	fd    int    // pidfd, or -1
	start string // /proc/<pid>/stat start time, without a pidfd
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
		return h
	}
	h.start = startTime(pid)
	return h
}

// exited reports whether the process is gone. A pidfd polls readable once
// its process has exited.
func (h *procHandle) exited() bool {
	if h.fd >= 0 {
		fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return err == nil && n > 0
		}
	}
	if h.start == "" {
		// Neither a pidfd nor /proc: ask the kernel whether the pid exists
		// (pid reuse cannot be told apart here).
		return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
	}
	return startTime(h.pid) != h.start
}

func (h *procHandle) close() {
	if h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
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
	caller *keys.Caller
	handle procHandle
	conns  int
}

// watchProcs starts the watcher of processes that have no connection
// left, unless it runs already. s.mu is held.
func (s *Server) watchProcs() {
	if s.watching || s.closing {
		return
	}
	s.watching = true
	s.watchers.Add(1)
	go s.reapProcs()
}

// reapProcs checks, every ProcessPoll, whether the processes without a
// connection still exist, and releases the keyrings of those that do not.
// It ends when no such process is left, or at Shutdown.
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
		for pid, p := range s.procs {
			if p.conns > 0 {
				continue
			}
			if p.handle.exited() {
				delete(s.procs, pid)
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
		}
	}
}
