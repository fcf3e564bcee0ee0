package server

import (
	"fmt"
	"net"
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

// processTable is the client processes the daemon keeps, by pid, with
// those that have exited and wait in a tomb for their fork events, and
// the fork connector that tells of them (forks.go). Its methods are
// called with s.mu held; forks says what of it is not under s.mu.
type processTable struct {
	byPID    map[int]*proc
	watching bool // reapProcs runs

	tombs    map[int]tomb      // exited processes kept for their queued forks (forks.go)
	exitSeen map[int]time.Time // exits the connector told of before the daemon noticed them
	forks    forkConnector
}

func newProcessTable() processTable {
	return processTable{byPID: make(map[int]*proc)}
}

// lookup returns the process the daemon keeps with pid, or nil.
func (t *processTable) lookup(pid int) *proc { return t.byPID[pid] }

// add keeps p as the process with pid.
func (t *processTable) add(pid int, p *proc) { t.byPID[pid] = p }

// remove forgets the process with pid.
func (t *processTable) remove(pid int) { delete(t.byPID, pid) }

// takeAll empties the table and returns what it held, at Shutdown.
func (t *processTable) takeAll() map[int]*proc {
	procs := t.byPID
	t.byPID = make(map[int]*proc)
	return procs
}

// takeTombs empties the tombs and returns what they held, at Shutdown.
func (t *processTable) takeTombs() map[int]tomb {
	tombs := t.tombs
	t.tombs = nil
	return tombs
}

// handedOverLocked stops following the processes, which the new daemon
// follows now: the fork connector and the waits for their exits end
// (their handles close), and it returns them, for their keyrings to be
// let go of (not ended: nothing is entombed or pruned). s.mu is held.
func (t *processTable) handedOverLocked() []*proc {
	t.forks.stopLocked()
	var released []*proc
	for _, p := range t.byPID {
		p.handle.Close() // ends its awaitExit
		released = append(released, p)
	}
	return released
}

// sessionsHeld returns the session keyrings the processes hold.
func (t *processTable) sessionsHeld() map[*keys.Key]bool {
	held := make(map[*keys.Key]bool, len(t.byPID))
	for _, p := range t.byPID {
		if k := p.caller.Session(); k != nil {
			held[k] = true
		}
	}
	return held
}

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
	if !p.private && s.procs.lookup(p.handle.PID()) == p {
		s.procs.remove(p.handle.PID())
	}
	s.usage.dropProc(p.charge)
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
	if !s.procs.watching {
		s.procs.watching = true
		s.watchers.Add(1)
		go s.reapProcs()
	}
}

// awaitExit waits, parked on the runtime's poller, until p's process
// exits (its pidfd, or on the BSDs its kqueue, turns readable) or the
// handle is closed, and releases its keyrings if it has no connection
// then; otherwise its last close will.
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
	ended := s.procs.lookup(pid) == p && p.conns == 0
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
// connection and without a handle on the poller still exist, and releases
// the keyrings of those that do not. It ends when no such process is
// left, or at Shutdown.
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
		for _, p := range s.procs.byPID {
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
			s.procs.watching = false
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
	held := s.procs.sessionsHeld()
	s.tokens.prune(held)
	s.logins.pruneLocked(held)
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

// procRecord is a process handed over (handoverRecords), or the caller
// of a connection whose process the daemon cannot see (connRecord).
type procRecord struct {
	PID       int              `json:"pid"`
	Start     string           `json:"start"`
	Ghost     bool             `json:"ghost,omitempty"`
	Inherited bool             `json:"inherited,omitempty"`
	Settled   bool             `json:"settled,omitempty"`
	Caller    keys.CallerState `json:"caller"`
	// Threads are the callers of the process's threads other than its
	// first, by tid, that its intercepted calls made (their own @t).
	Threads map[int]keys.CallerState `json:"threads,omitempty"`
	// ThreadTasks are those threads' intercept.Caller.Task, by tid:
	// the kernel's identities of the tasks (pidfs), which the next
	// daemon's listeners give them too. A thread without one is known
	// again by its tid at its next call.
	ThreadTasks map[int]uint64 `json:"thread_tasks,omitempty"`
}

// record returns p's record, with its intercepted threads'.
func (p *proc) record() procRecord {
	pr := procRecord{PID: p.handle.PID(), Start: p.start, Ghost: p.ghost, Inherited: p.inherited.Load(),
		Settled: p.settled.Load(), Caller: p.caller.State()}
	p.calls.mu.Lock()
	for task, tc := range p.calls.threads {
		if pr.Threads == nil {
			pr.Threads, pr.ThreadTasks = make(map[int]keys.CallerState), make(map[int]uint64)
		}
		pr.Threads[tc.tid] = tc.c.kc.State()
		if !tc.pending {
			pr.ThreadTasks[tc.tid] = task
		}
	}
	p.calls.mu.Unlock()
	return pr
}

// recordsLocked returns the records of the processes to hand over: not
// the private ones (their connections carry them), not the entombed, and
// not asker, the new daemon, unless it has connections besides the one
// that asks. s.mu is held.
func (t *processTable) recordsLocked(asker *proc) []procRecord {
	var recs []procRecord
	for _, p := range t.byPID {
		if p.private || p.entombed.Load() || p == asker && p.conns <= 1 {
			continue // the new daemon itself is no client of its own
		}
		recs = append(recs, p.record())
	}
	return recs
}

// restoredProc makes a process again from its record, but for its
// handle, which the caller opens.
func (s *Server) restoredProc(rs *keys.Restore, pr *procRecord) (*proc, error) {
	caller, err := rs.Caller(pr.Caller)
	if err != nil {
		return nil, fmt.Errorf("server: process %d's keyrings: %w", pr.PID, err)
	}
	p := &proc{caller: caller, start: pr.Start, ghost: pr.Ghost, tracked: true}
	p.inherited.Store(pr.Inherited)
	p.settled.Store(pr.Settled)
	for tid, st := range pr.Threads {
		tcaller, err := rs.Caller(st)
		if err != nil {
			caller.Release()
			p.calls.releaseLocked()
			return nil, fmt.Errorf("server: process %d's thread %d's keyrings: %w", pr.PID, tid, err)
		}
		p.calls.adopt(s, p, tid, pr.ThreadTasks[tid], tcaller)
	}
	return p, nil
}

// restoreProcsLocked keeps again the processes handed over that still
// run, and returns how many. A process with a connection handed over
// (byPID) is pinned through it (SO_PEERPIDFD), which no reused pid can
// fool; another by its pid and start time. s.mu is held.
func (s *Server) restoreProcsLocked(rs *keys.Restore, recs []procRecord, byPID map[int]*net.UnixConn) (int, error) {
	n := 0
	for i := range recs {
		pr := &recs[i]
		if pr.PID <= 0 || s.procs.lookup(pr.PID) != nil {
			return n, fmt.Errorf("server: process record %d for pid %d", i, pr.PID)
		}
		var h process.Handle
		if uc := byPID[pr.PID]; uc != nil {
			h = process.Open(uc, pr.PID)
		} else {
			var ok bool
			if h, ok = process.OpenPID(pr.PID, pr.Start); !ok {
				continue // it exited meanwhile: its keyrings go
			}
		}
		p, err := s.restoredProc(rs, pr)
		if err != nil {
			h.Close()
			return n, err
		}
		p.handle = h
		cred := p.caller.Cred()
		cred.PID = pr.PID
		p.charge = chargeUID(cred, &h)
		s.procs.add(pr.PID, p)
		s.usage.restoreProc(p.charge)
		n++
	}
	return n, nil
}

// abandonLocked lets go of every process a restore made, when it fails:
// their handles, intercepted threads and keyrings go. s.mu is held.
func (t *processTable) abandonLocked() {
	for pid, p := range t.byPID {
		p.handle.Close()
		p.calls.releaseLocked()
		p.caller.Release()
		delete(t.byPID, pid)
	}
}
