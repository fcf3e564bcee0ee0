package server

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/process"
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
//
// How the daemon tells that a process has exited depends on the system
// ([process.Handle]): pidfds and /proc on Linux, kqueue's EVFILT_PROC
// on macOS and FreeBSD, kill(pid, 0) elsewhere.

// proc is a client process and its caller.
type proc struct {
	caller *keys.Caller
	handle process.Handle
	// start is the process's start time ([process.Stat]), which tells it from
	// a later process with its pid when a descendant's ancestry names it;
	// "" where the daemon cannot read it.
	start string
	// inherited: its session came from an ancestor (ancestry.go), and a
	// session token in its environment does not replace it, until the
	// process joins a session itself. Read by its connections without
	// s.mu.
	inherited atomic.Bool
	// ghost: a process the daemon keeps that has not connected (a child
	// it saw forked, a parent given a session): its caller holds only what
	// it inherited, and its first connection replaces it with one of its
	// own credentials (accept).
	ghost bool
	// entombed: it has exited, and its caller is kept for fork events
	// still queued for it (forks.go).
	entombed atomic.Bool
	// settled: the daemon has given it its login's session, or found it
	// needs none (login.go).
	settled atomic.Bool
	// calls serves its intercepted system calls (intercept.go).
	calls    intercepting
	conns    int
	awaiting bool // awaitExit runs for it
	tracked  bool // counted in the server's usage (admitProc)
	private  bool // a caller whose pid the daemon cannot see: one connection's
	// charge is the uid the process is counted against (chargeUID), set
	// when it is met and never changed.
	charge uint32
}

// dropProcLocked forgets p: it leaves the table of processes (if still
// there) and its uid's count. The caller ends it (p.end) once s.mu is
// released. s.mu is held.
func (s *Server) dropProcLocked(p *proc) {
	if !p.tracked {
		return
	}
	p.tracked = false
	if !p.private && s.procs[p.handle.PID()] == p {
		delete(s.procs, p.handle.PID())
	}
	s.dropProc(p.charge)
	s.idleForksLocked()
}

// linger keeps a process that has closed its last connection, until it
// exits. s.mu is held.
func (s *Server) linger(p *proc) {
	if s.closing {
		return
	}
	if p.handle.File() != nil {
		if !p.awaiting {
			p.awaiting = true
			s.watchers.Add(1)
			go s.awaitExit(p, p.handle.File())
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
// exits (its pidfd, or on the BSDs its kqueue, turns readable) or the
// handle is closed, and releases
// its keyrings if it has no connection then; otherwise its last close
// will.
func (s *Server) awaitExit(p *proc, f *os.File) {
	defer s.watchers.Done()
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	if raw.Read(func(fd uintptr) bool { return p.handle.ExitPolled(int(fd)) }) != nil {
		return // closed: the proc was ended
	}
	s.mu.Lock()
	p.awaiting = false
	pid := p.handle.PID()
	ended := s.procs[pid] == p && p.conns == 0
	if ended {
		s.dropProcLocked(p)
		s.entombLocked(p)
		s.pruneTokens()
	}
	s.mu.Unlock()
	if ended {
		p.end()
	}
}

// reapProcs checks, every ProcessPoll, whether the processes without a
// connection and without a handle on the poller still exist, and releases the keyrings
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
			if p.conns > 0 || p.handle.File() != nil {
				continue
			}
			if p.handle.Exited() {
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

// end releases a process's keyrings, as its exit does in the kernel,
// unless it is entombed (forks.go): then only its handle is closed, and
// its keyrings go when the tomb does.
func (p *proc) end() {
	p.calls.release()
	p.handle.Close()
	if !p.entombed.Load() {
		p.caller.Release()
	}
}

// pruneTokens forgets the session tokens of sessions that no client
// process holds any more: with every process that joined it gone, the
// session is over; and so are logins (login.go). s.mu is held.
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
	s.pruneLogins(held)
}

// checkProc says, once, when the daemon cannot read processes in its own
// view ([process.OwnView]: /proc is another pid namespace's): a process it
// meets then has no ancestry, capabilities (uid 0 alone is privileged)
// or login, and its intercepted calls cannot be served.
func (s *Server) checkProc() {
	if !process.OwnView() {
		s.log.Warn("ukeyd: /proc is another pid namespace's (give the daemon its own: unshare --mount-proc, or the container's /proc); processes are not read there: no inherited sessions, logins or capabilities, and no intercepted calls")
	}
}
