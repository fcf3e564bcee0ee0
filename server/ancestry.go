package server

import (
	"github.com/ukeys/ukeys/keys"

	"github.com/ukeys/ukeys/internal/process"
)

// A process's session keyring is its parent's, as the kernel copies a
// task's credentials at fork and keeps them across exec and setuid. The
// daemon cannot see forks happen (without the process events connector),
// so when it first meets a process it walks the process's ancestry,
// nearest first, to the nearest ancestor it knows (a client, or a
// process whose session a client set with session_to_parent), and gives
// the new process that ancestor's session. Each ancestor is identified by
// pid and start time, so that a pid reused by an unrelated process is not
// taken for the process the daemon knew. This happens once per process,
// never per request.
//
// What the walk cannot find (an ancestor that has exited, its children
// reparented; a process in another pid namespace) the environment's
// session token still carries (UKEYS_SESSION): it is used only by a
// process that inherited no session this way.

// maxAncestry bounds the walk: beyond it, a process is taken to have no
// known ancestor.
const maxAncestry = 64

// procID names one process: its pid, and its start time, which tells it
// from a later process given the same pid.
type procID struct {
	pid   int
	start string
}

// ancestry returns pid's start time and its ancestors, nearest first, up
// to maxAncestry, stopping below init. It reads each process's parent and
// start time once, without the server's lock.
func ancestry(pid int) (start string, ancestors []procID) {
	return ancestryUntil(pid, nil)
}

// ancestryUntil is ancestry, stopping after the first ancestor for which
// last (if not nil) reports true.
func ancestryUntil(pid int, last func(procID) bool) (start string, ancestors []procID) {
	if !process.TreeSupported || pid <= 1 {
		return "", nil
	}
	ppid, start, ok := process.Stat(pid)
	if !ok {
		return "", nil
	}
	for ppid > 1 && len(ancestors) < maxAncestry {
		pppid, pstart, ok := process.Stat(ppid)
		if !ok {
			break
		}
		a := procID{pid: ppid, start: pstart}
		ancestors = append(ancestors, a)
		if last != nil && last(a) {
			break
		}
		ppid = pppid
	}
	return start, ancestors
}

// testHookInheritance, where a test sets it, learns of every process
// whose ancestry inheritance reads.
var testHookInheritance func(pid int)

// inheritance is ancestry as far as a new process's inheritance needs
// it: up to the nearest ancestor the server knows, whose session it
// inherits (inheritLocked). A process started from a shell ten levels
// below init whose parent is a client costs the daemon two reads of
// /proc, not eleven.
func (s *Server) inheritance(pid int) (start string, ancestors []procID) {
	if testHookInheritance != nil {
		testHookInheritance(pid)
	}
	return ancestryUntil(pid, func(a procID) bool {
		s.mu.Lock()
		p := s.procs.lookup(a.pid)
		known := p != nil && p.start != "" && p.start == a.start && !p.private
		s.mu.Unlock()
		return known
	})
}

// ghostStart is inheritance for a process that connects for the first
// time while the daemon keeps a ghost of its pid (forks.go): when h, the
// connection's own pidfd, and the ghost's both say their process is
// alive, they are one process, and the start time read when it forked
// is its start. A pid is another process's only once the process that
// had it has exited and been reaped: the ghost's process was forked
// before the daemon looked it up, and lives after h was checked, so it
// had the pid all along, while the peer had it too. That saves reading
// /proc for the process and its parent on every short-lived command run
// from a shell the daemon keeps (`id=$(ukeyctl add ...)` in a script).
// Without a pidfd from the socket (SO_PEERPIDFD, Linux 6.5) the ancestry
// is read as for any other process.
func (s *Server) ghostStart(g *proc, h *process.Handle) (start string, ancestors []procID) {
	if h.IsPeer() && !h.Exited() {
		s.mu.Lock()
		same := s.procs.lookup(g.handle.PID()) == g && g.ghost && !g.handle.Exited()
		s.mu.Unlock()
		if same {
			return g.start, nil
		}
	}
	return s.inheritance(h.PID())
}

// inheritedLocked returns the process the daemon knows that is the
// nearest of ancestors, or nil. s.mu is held.
func (s *Server) inheritedLocked(ancestors []procID) *proc {
	for _, a := range ancestors {
		if p := s.procs.lookup(a.pid); p != nil && p.start != "" && p.start == a.start && !p.private {
			return p
		}
	}
	return nil
}

// inheritLocked gives a new process what the kernel's fork gives a
// child of the ancestor it descends from (keys.Caller.Inherit), and
// reports whether a session came with it. s.mu is held.
func (s *Server) inheritLocked(p *proc, ancestors []procID) bool {
	a := s.inheritedLocked(ancestors)
	return a != nil && inherit(p, a.caller)
}

// inherit gives p what a child inherits of its ancestor a
// (keys.Caller.Inherit), and reports whether p's session is then one it
// keeps against a session token. A session the daemon made for a login
// (login.go) is the exception on two counts: it passes only to processes
// of the login's uid (one running as another uid joins a login of its
// own, as su and sudo's pam_keyinit would give it), and a token the
// process presents replaces it, as it would replace no session at all.
func inherit(p *proc, a *keys.Caller) bool {
	if a.InLogin() && a.Cred().UID != p.caller.Cred().UID {
		return false
	}
	return p.caller.Inherit(a) && !p.caller.InLogin()
}

// knownProc returns the process pid, started at start, as the daemon
// keeps it: the one it knows, or else one it starts to keep now (a
// client's parent that never connected), with the credentials cred, and
// follows until it exits.
func (s *Server) knownProc(pid int, start string, cred keys.Cred) (*proc, error) {
	s.mu.Lock()
	p := s.procs.lookup(pid)
	s.mu.Unlock()
	if p != nil && p.start == start && !p.handle.Exited() {
		if p.caller.Cred().UID != cred.UID {
			return nil, keys.EPERM
		}
		return p, nil
	}
	// Forks are followed from before the process is kept, as accept's.
	s.holdForks()
	defer s.unholdForks()
	h, ok := process.OpenPID(pid, start)
	if !ok {
		return nil, keys.EPERM
	}
	cred.PID, cred.Caps, cred.CapsKnown = pid, 0, true
	cred.CapsIf, cred.CapsIn = 0, nil
	charge := chargeUID(cred, &h)
	s.mu.Lock()
	if q := s.procs.lookup(pid); q != nil && q.start == start && !q.handle.Exited() {
		s.mu.Unlock()
		h.Close() // met meanwhile
		if q.caller.Cred().UID != cred.UID {
			return nil, keys.EPERM
		}
		return q, nil
	}
	if s.closing {
		s.mu.Unlock()
		h.Close()
		return nil, keys.EPERM
	}
	if e := s.usage.admitProc(charge); e != 0 {
		s.mu.Unlock()
		h.Close()
		return nil, e
	}
	var ended *proc
	if q := s.procs.lookup(pid); q != nil {
		// A process gone whose pid this one has: its keyrings go.
		s.dropProcLocked(q)
		if q.conns == 0 {
			ended = q
		}
	}
	p = &proc{caller: s.svc.NewCaller(cred), handle: h, start: start, tracked: true, ghost: true, charge: charge}
	s.procs.add(pid, p)
	s.linger(p)
	s.mu.Unlock()
	if ended != nil {
		ended.end()
	}
	return p, nil
}
