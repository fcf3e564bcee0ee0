package server

import (
	"os"
	"sync"
	"time"

	"github.com/ukeys/ukeys/internal/forks"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
)

// The kernel's process events connector (NETLINK_CONNECTOR, CN_IDX_PROC)
// tells a daemon with CAP_NET_ADMIN of every fork as it happens. A child
// forked by a process the daemon keeps inherits that process's session
// there and then (a "ghost": a process the daemon keeps that has not
// spoken to it yet), so that the session outlives the parent with the
// child, as the kernel's credentials do: "(sleep 1; keyctl print
// %user:k) & exit" in a session finds the key after the shell has gone.
// Without the connector (not root, another system) the daemon learns a
// process's ancestry only when it first meets it (ancestry.go).

// A tomb keeps an exited process's caller (and with it its session)
// until the connector has told the daemon of that exit: its forks were
// queued before its exit, and a child whose fork the daemon reads only
// after it noticed the exit (through the pidfd, on another goroutine)
// must still find its parent's session. The exit event ends the tomb;
// so does a fork that gives its pid to another process, and, if events
// were lost, age.
type tomb struct {
	p  *proc
	at time.Time
}

// tombMaxAge bounds how long a tomb waits for an exit event that was
// lost.
const tombMaxAge = 30 * time.Second

// entombLocked keeps p, a process that has exited and left the table,
// in a tomb while forks are followed; p.end then leaves its keyrings to
// the tomb. s.mu is held.
func (s *Server) entombLocked(p *proc) { s.procs.entomb(p, s.closing) }

func (t *processTable) entomb(p *proc, closing bool) {
	if _, seen := t.exitSeen[p.handle.PID()]; seen {
		// The connector told of the exit first: every fork queued for
		// the process has been read.
		delete(t.exitSeen, p.handle.PID())
		return
	}
	if t.forks.file == nil || closing || p.private || p.caller.Session() == nil {
		return
	}
	if t.tombs == nil {
		t.tombs = make(map[int]tomb)
	}
	if old, ok := t.tombs[p.handle.PID()]; ok {
		old.p.caller.Release()
	}
	p.entombed.Store(true)
	t.tombs[p.handle.PID()] = tomb{p: p, at: time.Now()}
}

// forkConnector is the subscription to the connector, while the daemon
// follows forks, and what decides when it does. Under s.mu, but for once
// and read, which order themselves.
type forkConnector struct {
	file  *os.File    // the connector's socket, while followed
	able  bool        // it can be followed here (probeForks)
	holds int         // accepts that need it until their process is kept (holdForks)
	idle  *time.Timer // gives it up once no process is kept (idleForksLocked)
	subs  int         // subscriptions made, for tests
	once  sync.Once   // probeForks, on the first Serve
	read  forkReader  // orders the connector's events with intercepted calls (syncForks)
}

// stopLocked stops following forks for good (Shutdown, a hand-over):
// the socket closes, which ends its reader, and the idle timer stops.
// s.mu is held.
func (f *forkConnector) stopLocked() {
	if f.file != nil {
		f.file.Close() // ends its reader
		f.file = nil
	}
	if f.idle != nil {
		f.idle.Stop()
	}
}

// forkReader is held by whoever takes datagrams off the connector
// socket, from the read until their events are applied (readForks,
// syncForks): once a holder finds the socket empty, every event the
// kernel had queued has been applied.
type forkReader struct {
	mu  sync.Mutex
	buf []byte // syncForks'
}

// handle applies one connector event.
func (s *Server) handle(ev forks.Event) {
	s.mu.Lock()
	execd, done := s.procs.apply(ev, time.Now())
	if len(done) > 0 {
		s.idleForksLocked()
	}
	s.mu.Unlock()
	if execd != nil {
		execd.Exec()
	}
	if !ev.Exit && !ev.Exec {
		s.forked(ev)
	}
	for _, p := range done {
		p.caller.Release()
	}
}

// apply applies a connector event to the table: it returns the caller
// of a process that ran a new program (execd), and the tombs that ended,
// whose keyrings the caller releases once s.mu is. s.mu is held.
func (t *processTable) apply(ev forks.Event, now time.Time) (execd *keys.Caller, done []*proc) {
	switch {
	case ev.Exec:
		// The exit reported before it was its first thread's, killed by
		// the exec (de_thread): the process lives on.
		delete(t.exitSeen, ev.PID)
		// A new program: the kernel drops the process's thread and
		// process keyrings at exec (it keeps the session). Without
		// this, a process the daemon keeps by pid and start time would
		// meet its keyrings again when the new program connects
		// (TestExecDropsProcessAndThreadKeyrings).
		if p := t.lookup(ev.PID); p != nil {
			execd = p.caller
			// Its intercepted threads go at its next call.
			p.calls.execd.Store(true)
		}
	case ev.Exit:
		if tb, ok := t.tombs[ev.PID]; ok {
			delete(t.tombs, ev.PID)
			done = append(done, tb.p)
		} else if t.lookup(ev.PID) != nil {
			// Read before the daemon noticed the exit itself: no tomb
			// is needed then (entomb).
			if t.exitSeen == nil {
				t.exitSeen = make(map[int]time.Time)
			}
			t.exitSeen[ev.PID] = now
		}
	default:
		// A fork makes childPid another process's: any tomb of that pid
		// has had every fork queued for it, and an exit seen of that pid
		// was another process's.
		if tb, ok := t.tombs[ev.ChildPid]; ok {
			delete(t.tombs, ev.ChildPid)
			done = append(done, tb.p)
		}
		delete(t.exitSeen, ev.ChildPid)
	}
	for pid, tb := range t.tombs {
		if now.Sub(tb.at) > tombMaxAge {
			delete(t.tombs, pid)
			done = append(done, tb.p)
		}
	}
	for pid, at := range t.exitSeen {
		if now.Sub(at) > tombMaxAge {
			delete(t.exitSeen, pid)
		}
	}
	return execd, done
}

// forked gives a child forked by a process the daemon keeps (or has just
// entombed) what the child inherits (its session), as a ghost the daemon
// follows until the child exits or connects. A parent without a session
// passes nothing, and the child is not kept.
func (s *Server) forked(f forks.Event) {
	s.mu.Lock()
	parent := s.procs.lookup(f.ParentTgid)
	if parent == nil {
		if t, ok := s.procs.tombs[f.ParentTgid]; ok {
			parent = t.p
		}
	}
	var pcaller *keys.Caller
	if parent != nil && !s.closing {
		pcaller = parent.caller
	}
	s.mu.Unlock()
	if pcaller == nil || pcaller.Session() == nil {
		return
	}
	_, start, ok := process.Stat(f.ChildPid)
	if !ok {
		return // gone already
	}
	cred := pcaller.Cred()
	cred.PID = f.ChildPid
	// Charged to the uid the child has now, not its parent's: a child
	// that has setuid since (a root process starting another user's
	// program) and forks on would otherwise count its processes against
	// the root's bound, until root's own were refused
	// (TestGhostsAreChargedToTheirOwnUID).
	if st, ok := procfs.ReadStatus(f.ChildPid); ok {
		cred.UID, cred.GID = st.UIDs[1], st.GIDs[1]
	}
	caller := s.svc.NewCaller(cred)
	if !caller.Inherit(pcaller) {
		caller.Release()
		return
	}
	h, ok := process.OpenPID(f.ChildPid, start)
	if !ok {
		caller.Release()
		return
	}
	charge := chargeUID(cred, &h)
	s.mu.Lock()
	if s.closing || s.procs.lookup(f.ChildPid) != nil || s.usage.admitProc(charge) != 0 {
		s.mu.Unlock()
		h.Close()
		caller.Release()
		return
	}
	p := &proc{caller: caller, handle: h, start: start, tracked: true, ghost: true, charge: charge}
	s.procs.add(f.ChildPid, p)
	s.linger(p)
	s.mu.Unlock()
}

// The daemon follows forks only while it keeps a process: the connector
// reports every process of the host to every subscriber, and the kernel
// builds and queues each report in the forking process, so following
// forks while keeping nobody would slow every fork of the host for no one
// (TestForksFollowedWhileProcessesKept). With no process kept, no fork
// can inherit anything from the daemon: a process it meets later learns
// its ancestry when it connects.

// forksIdleAfter is how long the daemon goes on following forks once it
// keeps no process (and no exited one waits for its exit event): a
// script that runs ukeyctl now and then does not make it subscribe
// again every time.
var forksIdleAfter = 10 * time.Second

// probeForks, at the first Serve, learns whether forks can be followed
// here, and follows them, for a while at least.
func (s *Server) probeForks() {
	f := s.subscribeForks(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == nil {
		return
	}
	s.procs.forks.able = true
	s.adoptForksLocked(f)
	s.idleForksLocked()
}

// adoptForksLocked makes f the subscription, read by a goroutine of its
// own, or closes it if there is one already or the daemon is closing.
// s.mu is held.
func (s *Server) adoptForksLocked(f *os.File) {
	fc := &s.procs.forks
	if s.closing || fc.file != nil {
		f.Close()
		return
	}
	fc.file = f
	fc.subs++
	s.watchers.Add(1)
	go s.readForks(f)
}

// holdForks is called before accept keeps a process: forks are followed
// from then on (the daemon subscribes again if it had gone idle), and
// not given up before unholdForks, by which time the process is kept.
func (s *Server) holdForks() {
	s.mu.Lock()
	fc := &s.procs.forks
	if !fc.able || s.closing {
		s.mu.Unlock()
		return
	}
	fc.holds++
	if fc.idle != nil {
		fc.idle.Stop()
	}
	subscribed := fc.file != nil
	s.mu.Unlock()
	if subscribed {
		return
	}
	if f := s.subscribeForks(true); f != nil {
		s.mu.Lock()
		s.adoptForksLocked(f)
		s.mu.Unlock()
	}
}

// unholdForks ends holdForks' hold.
func (s *Server) unholdForks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fc := &s.procs.forks; fc.holds > 0 {
		fc.holds--
		s.idleForksLocked()
	}
}

// forksIdleLocked reports whether the daemon follows forks for nobody:
// it keeps no process, no exited one waits for its exit event, and no
// accept is about to keep one. s.mu is held.
func (s *Server) forksIdleLocked() bool {
	return !s.closing && s.procs.followsForNobody()
}

func (t *processTable) followsForNobody() bool {
	return t.forks.file != nil && len(t.byPID) == 0 && len(t.tombs) == 0 && t.forks.holds == 0
}

// idleForksLocked arms the timer that gives up following forks, if the
// daemon follows them for nobody. s.mu is held.
func (s *Server) idleForksLocked() {
	if !s.forksIdleLocked() {
		return
	}
	fc := &s.procs.forks
	if fc.idle == nil {
		fc.idle = time.AfterFunc(forksIdleAfter, s.forksIdleCheck)
		return
	}
	fc.idle.Reset(forksIdleAfter)
}

// forksIdleCheck gives up following forks if the daemon still keeps no
// process.
func (s *Server) forksIdleCheck() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.forksIdleLocked() {
		return
	}
	s.procs.forks.file.Close() // ends its reader
	s.procs.forks.file = nil
	clear(s.procs.exitSeen)
}

// subscribeForks subscribes to the process events connector
// ([forks.Subscribe]) and returns the socket, or nil where the daemon
// cannot follow forks; why, once, at debug level unless quiet.
func (s *Server) subscribeForks(quiet bool) *os.File {
	if quiet {
		return forks.Subscribe(nil)
	}
	return forks.Subscribe(s.log.Debug)
}

// readForks hands each event on f to handle until f is closed (by
// Shutdown, a hand-over, or the daemon going idle). watchers counts it.
func (s *Server) readForks(f *os.File) {
	defer s.watchers.Done()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		// s.procs.forks.read is held from each read until its events are
		// applied, and not while waiting for one (syncForks).
		n, fromKernel, err := forks.Read(rc, buf, &s.procs.forks.read.mu)
		if err != nil {
			if forks.Lost(err) {
				// Events were lost: those children learn their
				// ancestry when they connect, as without the
				// connector.
				continue
			}
			return // closed
		}
		if fromKernel {
			for _, ev := range forks.Parse(buf[:n]) {
				s.handle(ev)
			}
		}
		s.procs.forks.read.mu.Unlock()
	}
}

// syncForks applies every event the connector has queued, if the daemon
// follows forks. An intercepted call runs it before it is served: the
// kernel queues a process's exec event before the new program runs, so
// that a call the new program makes finds the exec applied (the thread
// and process keyrings dropped), which the goroutine that reads the
// events (readForks) may not yet have done.
func (s *Server) syncForks() {
	s.mu.Lock()
	f := s.procs.forks.file
	s.mu.Unlock()
	if f == nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	fr := &s.procs.forks.read
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.buf == nil {
		fr.buf = make([]byte, 64<<10)
	}
	forks.Drain(rc, fr.buf, s.handle)
}
