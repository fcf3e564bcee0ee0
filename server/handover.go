package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// A hand-over moves everything a daemon holds to the daemon that takes
// over from it (ukeyd -takeover), so that an upgrade loses nothing and
// refuses no client. The new daemon connects to the old one's socket and
// asks (OpTakeover, with the versions it reads); the old one, if the
// asker runs as its own user and reads its versions:
//
//  1. stops accepting (its listeners stay open) and parks every
//     connection at a request's boundary: requests in flight finish and
//     are answered, and what a client sends meanwhile waits in its
//     socket;
//  2. sends, on the hand-over connection, its listening sockets and every
//     client's connection (SCM_RIGHTS), then the keys' state stream
//     (keys.Service.Export) and its own records: processes, sessions,
//     logins, and for each connection the bytes read from it and not yet
//     served (a frame begun, or frames pipelined behind the last);
//  3. waits for the new daemon to say it serves, and then exits, leaving
//     the sockets to it: a client sees its next answer come from the new
//     daemon, a moment late.
//
// If the new daemon refuses, fails or dies before saying it serves, the
// old one takes back its listeners and connections and goes on serving as
// if nothing had happened. Nothing is written to disk: the streams cross
// the hand-over socket, in the kernel's buffers, and every buffer of the
// old daemon that held them is wiped. The streams are versioned: a daemon
// reads every earlier version (keys.StateVersion, HandoverVersion), and
// one that would have to read a later version refuses to take over.
//
// A caller's own section may follow the server's state
// (Config.HandOverExtra, TakeOverExtra): the seccomp agent's containers
// go so, each its own Server's frozen state.
//
// Key watches go with their connections: the keys watched, the
// notifications not yet read. Seccomp listeners (ukeyctl run) go too,
// detached between two calls, with their processes' threads' keyrings:
// a call made meanwhile waits in its caller for the new daemon. A
// request-key upcall in progress is waited for (up to HandoverTimeout):
// its helper is this daemon's child, and its requester waits for it.

// HandoverVersion is the version of the records a hand-over carries
// beside the keys' state stream. 2: a section of the caller's own may
// follow (Config.HandOverExtra), which the records say (Extra); a
// version 1 stream has none.
const HandoverVersion = 2

// HandoverTimeout bounds how long a hand-over waits for connections to
// reach a request's boundary and for request-key upcalls to end.
var HandoverTimeout = 10 * time.Second

// handoverStallTimeout bounds how long the old daemon, with every client
// parked, waits for the new one to read the state and to say it serves:
// a new daemon that stalls (or an asker that never reads) holds the
// clients only that long before the old daemon serves on.
var handoverStallTimeout = 30 * time.Second

// ErrHandedOver is returned by [Server.Serve] once the daemon has handed
// over to another: the process is to exit without shutting anything down.
var ErrHandedOver = errors.New("server: handed over to another daemon")

// handover is a hand-over under way, on the old daemon's side.
type handover struct {
	from *conn // the hand-over connection: not parked, not handed over
	mu   sync.Mutex
	cond sync.Cond
	// waiting holds the connections not parked yet; parked, what each
	// parked one left to hand over.
	waiting map[*conn]bool
	parked  map[*conn]parkedConn
	accepts int // Serve loops still accepting
	done    chan struct{}
	ok      bool // decided: handed over (else resumed)
	// seccomp holds the seccomp listeners detached from their serving,
	// to hand over (or to serve again).
	seccomp []detachedListener
	// pipes are the notification pipes handed over (records).
	pipes []*intercept.WatchPipe
	// extra is the caller's section (Config.HandOverExtra), its
	// descriptors, and what to tell it of the outcome.
	extra     []byte
	extraFDs  []int
	extraDone func(bool)
	hasExtra  bool
}

// takeExtra asks the caller for its section (Config.HandOverExtra),
// once everything is parked.
func (s *Server) takeExtra(ho *handover) error {
	if s.cfg.HandOverExtra == nil {
		return nil
	}
	var b bytes.Buffer
	fds, done, err := s.cfg.HandOverExtra(&b)
	if err != nil {
		clear(b.Bytes())
		return fmt.Errorf("server: the hand-over's extra section: %w", err)
	}
	ho.extra, ho.extraFDs, ho.extraDone, ho.hasExtra = b.Bytes(), fds, done, true
	return nil
}

// detachedListener is a seccomp listener between two daemons.
type detachedListener struct {
	fd int
	li listenerInfo
}

// parkedConn is what a parked connection hands over.
type parkedConn struct {
	version uint16
	unread  []byte
	err     error // the answers it owed could not be written: not handed over
}

// HandedOver is closed once the daemon has handed everything over to
// another daemon, which now serves its clients: the process exits then,
// without [Server.Shutdown] (which would close the clients' connections).
func (s *Server) HandedOver() <-chan struct{} { return s.handedOver }

// pausedBy reports whether a read that ended with err (nil: no read) was
// cut short by a hand-over, and the connection is to park.
func (c *conn) pausedBy(err error) bool {
	return c.pausing.Load() && (err == nil || errors.Is(err, os.ErrDeadlineExceeded))
}

// pauseIdle asks the connection to park: at once if it is waiting for a
// request (its read is cut short), or after the request it serves.
func (c *conn) pauseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pausing.Store(true)
	c.uc.SetReadDeadline(time.Unix(1, 0))
	if q := c.watch.Load(); q != nil {
		// A wait for a notification ends now (EAGAIN: the client asks
		// again, of the new daemon).
		q.Interrupt()
	}
}

// park hands the connection's state to the hand-over under way and waits
// for its outcome. It reports whether the serving goroutine is to end:
// the hand-over happened (the connection, handed over, is left alone:
// gone). If not, the connection serves on.
func (c *conn) park(sc *sock.Conn, version uint16) (gone bool) {
	s := c.s
	s.mu.Lock()
	ho := s.ho
	s.mu.Unlock()
	if ho == nil {
		c.pausing.Store(false)
		return false
	}
	pc := parkedConn{version: version}
	// The answers it owes go out first: the new daemon answers only
	// what it reads.
	if sc.Out.Len() > 0 {
		c.uc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		pc.err = c.flush()
	}
	pc.unread = sc.In.Unread()
	ho.mu.Lock()
	delete(ho.waiting, c)
	ho.parked[c] = pc
	ho.cond.Broadcast()
	ho.mu.Unlock()
	<-ho.done
	secmem.Free(pc.unread) // the arena's (the reader's memory); sent, if it went
	if ho.ok {
		// Handed over; or, if its answers could not be written, left
		// behind, to end with this daemon.
		c.gone = pc.err == nil
		sc.In.Release()
		return true
	}
	c.mu.Lock()
	c.pausing.Store(false)
	c.uc.SetReadDeadline(time.Time{})
	c.mu.Unlock()
	return false
}

// handOver serves OpTakeover on the hand-over connection c: it checks
// the asker and the versions, parks everything, sends it all, and exits
// the daemon's serving if the new daemon says it serves (see above).
func (s *Server) handOver(c *conn, sc *sock.Conn, req *wire.Request, version uint16) {
	answer := func(resp *wire.Response) error {
		resp.Tag = req.Tag
		sc.Out.Response(resp)
		_, err := sc.Flush()
		return err
	}
	a, err := wire.SpecOf(wire.OpTakeover).Check(req)
	if err != nil {
		answer(fail(err))
		return
	}
	// Only the daemon's equal may take its keys: its own user (root for
	// the system daemon) in its own user namespace, with every capability
	// the daemon holds. The system daemon's equal could read the keys
	// from its memory anyway; a user daemon's could not (the daemon is
	// not dumpable), but it is the user's own process, which may stop
	// the daemon and serve the user's socket itself. A process of the
	// same uid in a user namespace of its own is not: it may not ptrace
	// the daemon, and reads no key it does not possess.
	if !asPrivileged(c.kc.Cred()) {
		s.log.Warn("ukeyd: refusing a hand-over to a process less privileged than the daemon", "uid", c.cred.UID, "pid", c.cred.PID)
		answer(fail(keys.EPERM))
		return
	}
	if same, err := c.proc.handle.InOwnUserNS(); !same {
		s.log.Warn("ukeyd: refusing a hand-over to a process in another user namespace, or one whose namespace cannot be told",
			"uid", c.cred.UID, "pid", c.cred.PID, "err", err)
		answer(fail(keys.EPERM))
		return
	}
	if a.Int(0) < HandoverVersion || a.Int(1) < keys.StateVersion {
		s.log.Warn("ukeyd: refusing a hand-over to a daemon that cannot read this one's state",
			"pid", c.cred.PID, "its_handover_version", a.Int(0), "its_state_version", a.Int(1),
			"handover_version", HandoverVersion, "state_version", keys.StateVersion)
		answer(fail(keys.EPROTONOSUPPORT))
		return
	}
	ho, errno := s.beginHandover(c)
	if errno != 0 {
		answer(fail(errno))
		return
	}
	s.log.Info("ukeyd: handing over to another daemon", "pid", c.cred.PID)
	ok := false
	defer func() { s.endHandover(ho, ok) }()
	if err := s.parkAll(ho); err != nil {
		s.log.Warn("ukeyd: hand-over abandoned; serving on", "err", err)
		answer(fail(keys.EBUSY))
		return
	}
	if err := answer(&wire.Response{}); err != nil {
		return
	}
	if err := s.takeExtra(ho); err != nil {
		s.log.Warn("ukeyd: hand-over failed; serving on", "err", err)
		return
	}
	// Writing the state allocates little that lives (the order of the
	// keys, buffers), while a collection would mark every key: Go's
	// collector waits until the stream is written. The daemon either
	// exits next or serves on as before.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if err := s.sendHandover(c, ho); err != nil {
		s.log.Warn("ukeyd: hand-over failed; serving on", "err", err)
		return
	}
	// The new daemon serves once it says so: one byte, 'K'.
	var b [1]byte
	c.uc.SetReadDeadline(time.Now().Add(handoverStallTimeout))
	if _, err := io.ReadFull(c.uc, b[:]); err != nil || b[0] != 'K' {
		s.log.Warn("ukeyd: the new daemon did not take over; serving on", "err", err)
		return
	}
	ok = true
	// The notification pipes are the new daemon's now: nothing this one
	// does on its way out (its keyrings released, its keys destroyed)
	// may post into them.
	for _, p := range ho.pipes {
		p.Close()
	}
	s.log.Info("ukeyd: handed over; exiting", "pid", c.cred.PID)
}

// beginHandover starts a hand-over from connection from, or says why it
// cannot start.
func (s *Server) beginHandover(from *conn) (*handover, keys.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing || s.ho != nil:
		return nil, keys.EBUSY
	}
	if s.cfg.CanHandOver != nil {
		if err := s.cfg.CanHandOver(); err != nil {
			s.log.Warn("ukeyd: refusing a hand-over", "reason", err.Error())
			return nil, keys.EOPNOTSUPP
		}
	}

	ho := &handover{from: from, waiting: make(map[*conn]bool), parked: make(map[*conn]parkedConn),
		accepts: len(s.lns), done: make(chan struct{})}
	ho.cond.L = &ho.mu
	s.ho = ho
	for _, ln := range s.lns {
		if u, ok := ln.(*net.UnixListener); ok {
			u.SetDeadline(time.Unix(1, 0)) // Serve's accept returns, and waits
		}
	}
	for c := range s.conns {
		if c != from {
			ho.waiting[c] = true
			c.pauseIdle()
		}
	}
	return ho, 0
}

// parkAll waits until every Serve loop has stopped accepting and every
// connection has parked or ended, and until no request-key upcall is in
// progress, for at most HandoverTimeout.
func (s *Server) parkAll(ho *handover) error {
	deadline := time.Now().Add(HandoverTimeout)
	t := time.AfterFunc(HandoverTimeout, func() {
		ho.mu.Lock()
		ho.cond.Broadcast()
		ho.mu.Unlock()
	})
	defer t.Stop()
	ho.mu.Lock()
	for (len(ho.waiting) > 0 || ho.accepts > 0) && time.Now().Before(deadline) {
		ho.cond.Wait()
	}
	waiting, accepts := len(ho.waiting), ho.accepts
	ho.mu.Unlock()
	if waiting > 0 || accepts > 0 {
		return fmt.Errorf("%d connections still busy after %v", waiting, HandoverTimeout)
	}
	for {
		s.mu.Lock()
		helpers := s.tokens.helpersRunning()
		for _, li := range s.listeners {
			if li.helper {
				helpers++ // a helper's program tree, still running
			}
		}
		s.mu.Unlock()
		if helpers == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d request-key upcalls still in progress after %v", helpers, HandoverTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The seccomp listeners stop between two calls: the callers of the
	// calls that arrive meanwhile wait in them for the new daemon.
	// A caller can hold its listener in a call for as long as it likes
	// (a read of memory whose page fault it answers itself): each is
	// detached side by side, and waited for until the hand-over's
	// deadline. One that has not stopped by then is left behind: its
	// callers' calls fail (ENOSYS) once this daemon is gone, and nobody
	// else's wait.
	s.mu.Lock()
	ls := make(map[*intercept.Listener]listenerInfo, len(s.listeners))
	maps.Copy(ls, s.listeners)
	s.mu.Unlock()
	type detached struct {
		li  listenerInfo
		fd  int
		err error
	}
	results := make(chan detached, len(ls))
	for l, li := range ls {
		go func() {
			fd, err := l.Detach()
			results <- detached{li, fd, err}
		}()
	}
	// Even past the deadline, a listener that is between calls stops
	// within a moment: it is given that.
	timer := time.NewTimer(max(time.Until(deadline), detachGrace))
	defer timer.Stop()
	for left := len(ls); left > 0; left-- {
		select {
		case r := <-results:
			if r.err == nil {
				ho.seccomp = append(ho.seccomp, detachedListener{fd: r.fd, li: r.li})
			}
		case <-timer.C:
			s.log.Warn("ukeyd: seccomp listeners held in a call by their callers are not handed over", "listeners", left)
			go func() {
				// Stopped at last: too late for the next daemon.
				for range left {
					if r := <-results; r.err == nil {
						closeFD(r.fd)
					}
				}
			}()
			return nil
		}
	}
	return nil
}

// detachGrace is how long a hand-over waits for its listeners to stop
// when its deadline has passed already.
const detachGrace = 2 * time.Second

// connEnded tells a hand-over under way that c ended before parking.
func (s *Server) connEnded(c *conn) {
	s.mu.Lock()
	ho := s.ho
	s.mu.Unlock()
	if ho == nil {
		return
	}
	ho.mu.Lock()
	delete(ho.waiting, c)
	ho.cond.Broadcast()
	ho.mu.Unlock()
}

// acceptParked tells a hand-over under way that a Serve loop stopped
// accepting; it returns the hand-over, or nil if there is none.
func (s *Server) acceptParked() *handover {
	s.mu.Lock()
	ho := s.ho
	s.mu.Unlock()
	if ho == nil {
		return nil
	}
	ho.mu.Lock()
	ho.accepts--
	ho.cond.Broadcast()
	ho.mu.Unlock()
	return ho
}

// endHandover decides the hand-over: handed over, everything parked
// leaves with it and HandedOver closes; otherwise everything serves on.
func (s *Server) endHandover(ho *handover, ok bool) {
	s.mu.Lock()
	var released []*proc
	for _, ln := range s.lns {
		u, isUnix := ln.(*net.UnixListener)
		switch {
		case !isUnix:
		case ok:
			// The socket is the new daemon's now: closing this daemon's
			// copy must not remove its name.
			u.SetUnlinkOnClose(false)
			u.Close()
		default:
			u.SetDeadline(time.Time{})
		}
	}
	if ok {
		// Nothing of this daemon's serving goes on: its background work
		// (the collector of exited processes, the fork follower, the
		// waits for exits) ends, without releasing anything, which is
		// the new daemon's now.
		if !s.closing {
			close(s.stop)
		}
		s.closing = true
		released = s.procs.handedOverLocked()
	}
	s.ho = nil
	s.mu.Unlock()
	// This daemon's keys are the new one's now: here they are released,
	// so that the collector wipes their payloads (and closes big keys'
	// files) while the process exits.
	for _, p := range released {
		p.caller.Release()
	}
	for _, d := range ho.seccomp {
		if ok {
			unix.Close(d.fd) // the new daemon's copy serves it
		} else if _, err := s.startListener(d.fd, d.li, intercept.HandlerFunc(s.intercepted)); err != nil {
			s.log.Warn("ukeyd: a seccomp listener could not be served again after a failed hand-over", "uid", d.li.uid, "err", err)
		}
	}
	ho.mu.Lock()
	ho.ok = ok
	ho.mu.Unlock()
	close(ho.done)
	clear(ho.extra)
	if ho.extraDone != nil {
		ho.extraDone(ok)
	}
	if ok {
		close(s.handedOver)
	}
}

// handoverRecords is what a hand-over carries beside the keys: the
// server's own state, as JSON (it is small beside the keys, and a reader
// of a later version ignores fields it does not know). Each table writes
// and reads its own records, beside it: procRecord (process.go),
// sessionRecord (tokens.go), loginRecord (login.go); the connections',
// seccomp listeners' and pipes' are here.
type handoverRecords struct {
	Version   int             `json:"version"`
	Listeners int             `json:"listeners"`
	Procs     []procRecord    `json:"procs"`
	Sessions  []sessionRecord `json:"sessions"`
	Logins    []loginRecord   `json:"logins"`
	Conns     []connRecord    `json:"conns"`
	Seccomp   []seccompRecord `json:"seccomp,omitempty"`
	Pipes     []pipeRecord    `json:"pipes,omitempty"`
	// Extra says that the caller's section follows the connections'
	// unread bytes (Config.HandOverExtra), with its descriptors (since
	// version 2).
	Extra *extraRecord `json:"extra,omitempty"`
	// extra is the section itself, written after the unread bytes.
	extra []byte
}

// extraRecord places the caller's section's descriptors: FDs of them from
// the FDth sent after the listening sockets'.
type extraRecord struct {
	FD  int `json:"fd"`
	FDs int `json:"fds"`
}

// pipeRecord is a notification pipe made for an intercepted program,
// whose write end is the FDth descriptor sent after the listening
// sockets': its state, the watches through which keys post to it, and
// the uid its descriptor is charged to (if any watch was set).
type pipeRecord struct {
	FD      int                 `json:"fd"`
	State   intercept.PipeState `json:"state"`
	Watch   *keys.WatchState    `json:"watch,omitempty"`
	UID     uint32              `json:"uid"`
	Charged bool                `json:"charged,omitempty"`
}

// seccompRecord is a seccomp listener (ukeyctl run), whose descriptor is
// the FDth sent after the listening sockets', as a connection's is.
type seccompRecord struct {
	FD  int    `json:"fd"`
	UID uint32 `json:"uid"`
	// Notify: its filter hands the daemon the notification pipes' calls
	// (listenerInfo.notify).
	Notify bool `json:"notify,omitempty"`
	// Tag is StartListener's.
	Tag string `json:"tag,omitempty"`
}

// connRecord is one connection, whose descriptor is the FDth sent (after
// the listeners'). A connection of a process the daemon keeps by pid
// names it; one whose process it cannot see carries its caller (Private).
type connRecord struct {
	FD      int         `json:"fd"`
	PID     int         `json:"pid"`
	Private *procRecord `json:"private,omitempty"`
	Version uint16      `json:"version"`
	// Unread is the bytes read from the connection and not yet served;
	// they may hold a payload, so they do not go into the JSON (whose
	// encoder's buffers cannot be wiped) but in a stream of their own
	// after it, UnreadLen bytes for each connection in turn.
	Unread    []byte           `json:"-"`
	UnreadLen int              `json:"unread_len,omitempty"`
	Watch     *keys.WatchState `json:"watch,omitempty"`
}

// records gathers the server's records of a parked daemon, and the
// descriptors to send: the listeners', then the connections'.
func (s *Server) records(ho *handover) (handoverRecords, []int, error) {
	rec := handoverRecords{Version: HandoverVersion}
	var fds []int
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range s.lns {
		u, ok := ln.(*net.UnixListener)
		if !ok {
			return rec, nil, fmt.Errorf("server: a listener of type %T cannot be handed over", ln)
		}
		fd, err := sock.FD(u)
		if err != nil {
			return rec, nil, err
		}
		fds = append(fds, fd)
	}
	rec.Listeners = len(fds)
	var asker *proc // the new daemon itself is no client of its own
	if ho.from != nil {
		asker = ho.from.proc
	}
	rec.Procs = s.procs.recordsLocked(asker)
	rec.Sessions = s.tokens.records()
	rec.Logins = s.logins.recordsLocked()
	for c, pc := range ho.parked {
		if pc.err != nil || c.helper != nil {
			// Its answers are lost, or it acted for an upcall that has
			// ended: it ends with this daemon.
			continue
		}
		fd, err := sock.FD(c.uc)
		if err != nil {
			return rec, nil, err
		}
		cr := connRecord{FD: len(fds) - rec.Listeners, PID: c.proc.handle.PID(), Version: pc.version, Unread: pc.unread}
		if q := c.watch.Load(); q != nil {
			st := q.State()
			cr.Watch = &st
		}
		if c.proc.private {
			pr := c.proc.record()
			cr.Private, cr.PID = &pr, 0
		}
		fds = append(fds, fd)
		rec.Conns = append(rec.Conns, cr)
	}
	for _, d := range ho.seccomp {
		rec.Seccomp = append(rec.Seccomp, seccompRecord{FD: len(fds) - rec.Listeners, UID: d.li.uid, Notify: d.li.notify, Tag: d.li.tag})
		fds = append(fds, d.fd)
	}
	// Notification pipes go with their watches: the programs reading
	// them read on, from the next daemon. A pipe whose watches are
	// another server's of this process (a container's) goes with that
	// one; one without watches, with the server that has no Member (the
	// host's).
	for _, p := range intercept.WatchPipes() {
		if owner, watched := pipeOwner(p); watched && owner != s || !watched && s.cfg.Member != nil {
			continue
		}
		st, w := p.State()
		pr := pipeRecord{FD: len(fds) - rec.Listeners, State: st}
		if wp := s.pipes[p]; wp.q != nil {
			ws := wp.q.State()
			pr.Watch, pr.UID, pr.Charged = &ws, wp.uid, true
		}
		rec.Pipes = append(rec.Pipes, pr)
		fds = append(fds, w)
		ho.pipes = append(ho.pipes, p)
	}
	if ho.hasExtra {
		rec.Extra = &extraRecord{FD: len(fds) - rec.Listeners, FDs: len(ho.extraFDs)}
		rec.extra = ho.extra
		fds = append(fds, ho.extraFDs...)
	}
	return rec, fds, nil
}

// maxFDsPerMessage is how many descriptors one message carries, under
// the kernel's SCM_MAX_FD (253).
const maxFDsPerMessage = 200

// sendHandover sends everything on the hand-over connection: the
// descriptors, in batches (a 4-byte count each, the last one 0), then
// the keys' state stream and the records, each in chunks (chunkWriter).
func (s *Server) sendHandover(c *conn, ho *handover) error {
	rec, fds, err := s.records(ho)
	if err != nil {
		return err
	}
	defer func() {
		for i := range rec.Conns {
			clear(rec.Conns[i].Unread)
		}
	}()
	c.uc.SetWriteDeadline(time.Now().Add(handoverStallTimeout))
	// A deep buffer lets this side write on while the new daemon makes
	// the keys it has read (the kernel caps it at wmem_max).
	c.uc.SetWriteBuffer(16 << 20)
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return err
	}
	for i := 0; ; i += maxFDsPerMessage {
		batch := fds[min(i, len(fds)):min(i+maxFDsPerMessage, len(fds))]
		var head [4]byte
		binary.BigEndian.PutUint32(head[:], uint32(len(batch)))
		var oob []byte
		if len(batch) > 0 {
			oob = unix.UnixRights(batch...)
		}
		var serr error
		if err := raw.Write(func(fd uintptr) bool {
			serr = unix.Sendmsg(int(fd), head[:], oob, nil, 0)
			return !errors.Is(serr, unix.EAGAIN)
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		if len(batch) == 0 {
			break
		}
	}
	return s.writeState(c.uc, &rec)
}

// writeState writes the keys' state stream, the records, and the
// connections' unread bytes, each in chunks (chunkWriter).
func (s *Server) writeState(w io.Writer, rec *handoverRecords) error {
	for i := range rec.Conns {
		rec.Conns[i].UnreadLen = len(rec.Conns[i].Unread)
	}
	// One buffer of chunks for the three streams, in the arena: the
	// keys' stream carries every payload.
	cw := newChunkWriter(w)
	defer cw.release()
	if err := s.svc.Export(cw); err != nil {
		cw.discard() // it holds the stream's last payloads
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	defer clear(b)
	if _, err := cw.Write(b); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	for _, cr := range rec.Conns {
		if _, err := cw.Write(cr.Unread); err != nil {
			return err
		}
	}
	if err := cw.Close(); err != nil {
		return err
	}
	if rec.Extra == nil {
		return nil
	}
	if _, err := cw.Write(rec.extra); err != nil {
		return err
	}
	return cw.Close()
}

// Freeze hands everything over to a daemon that does not run yet: as a
// hand-over does, it parks every connection and seccomp listener between two
// requests, and writes the keys and the records to w; it returns the
// descriptors the records name (the connections' and listeners', not the
// listening sockets', which the caller keeps by other means), for the caller
// to keep where the next daemon finds them ([Thaw]): ukeyd stores them in
// systemd's file-descriptor store when systemd stops it for a restart. After
// Freeze the server serves no more, and [Server.HandedOver] is closed; if it
// fails, everything serves on.
func (s *Server) Freeze(w io.Writer) ([]int, error) {
	ho, errno := s.beginHandover(nil)
	if errno != 0 {
		return nil, fmt.Errorf("server: cannot freeze: %w", errno)
	}
	ok := false
	defer func() { s.endHandover(ho, ok) }()
	if err := s.parkAll(ho); err != nil {
		return nil, err
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if err := s.takeExtra(ho); err != nil {
		return nil, err
	}
	rec, fds, err := s.records(ho)
	if err != nil {
		return nil, err
	}
	defer func() {
		for i := range rec.Conns {
			clear(rec.Conns[i].Unread)
		}
	}()
	fds = fds[rec.Listeners:]
	rec.Listeners = 0
	if err := s.writeState(w, &rec); err != nil {
		return nil, err
	}
	// The descriptors go on living in this process until it exits: the
	// caller passes them on first.
	kept := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		if err != nil {
			for _, k := range kept[:i] {
				unix.Close(k)
			}
			return nil, err
		}
		unix.CloseOnExec(d)
		kept[i] = d
	}
	ok = true
	// The notification pipes are the next daemon's (their copies are
	// kept): nothing this process does on its way out may post into
	// them.
	for _, p := range ho.pipes {
		p.Close()
	}
	return kept, nil
}

// chunkWriter frames a stream in chunks of at most chunkMax bytes, each
// after its 4-byte length, ended by an empty chunk (Close), so that the
// reader knows where one stream ends and what follows begins; it may
// write another stream after Close. Its buffer, in secmem's arena
// (locked, never dumped), is wiped after each chunk, the stream carrying
// payloads, and freed by release, after which it writes nothing more.
type chunkWriter struct {
	w   io.Writer
	buf []byte
}

const chunkMax = 256 << 10

func newChunkWriter(w io.Writer) *chunkWriter {
	return &chunkWriter{w: w, buf: secmem.Alloc(4 + chunkMax)[:4]}
}

// release wipes and frees the buffer.
func (cw *chunkWriter) release() {
	if cap(cw.buf) > 0 {
		secmem.Free(cw.buf[:cap(cw.buf)])
	}
	cw.buf = nil
}

func (cw *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 4+chunkMax-len(cw.buf))
		cw.buf = append(cw.buf, p[:k]...)
		secmem.WipeRegisters() // what the copy left of the stream there
		p, n = p[k:], n+k
		if len(cw.buf) == 4+chunkMax {
			if err := cw.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (cw *chunkWriter) flush() error {
	binary.BigEndian.PutUint32(cw.buf, uint32(len(cw.buf)-4))
	_, err := cw.w.Write(cw.buf)
	clear(cw.buf)
	cw.buf = cw.buf[:4]
	return err
}

// discard wipes what is buffered, for a stream abandoned unfinished.
func (cw *chunkWriter) discard() {
	clear(cw.buf[:cap(cw.buf)])
	cw.buf = cw.buf[:4]
}

// Close writes what is buffered and the empty chunk that ends the stream.
func (cw *chunkWriter) Close() error {
	if len(cw.buf) > 4 {
		if err := cw.flush(); err != nil {
			return err
		}
	}
	return cw.flush()
}

// chunkReader reads a stream chunkWriter wrote, up to its end, with at
// most max bytes in all.
type chunkReader struct {
	r    io.Reader
	left int // of the chunk being read
	max  int
	done bool
}

func (cr *chunkReader) Read(p []byte) (int, error) {
	for cr.left == 0 {
		if cr.done {
			return 0, io.EOF
		}
		var head [4]byte
		if _, err := io.ReadFull(cr.r, head[:]); err != nil {
			return 0, io.ErrUnexpectedEOF
		}
		n := int(binary.BigEndian.Uint32(head[:]))
		if n == 0 {
			cr.done = true
			return 0, io.EOF
		}
		if n > chunkMax || n > cr.max {
			return 0, fmt.Errorf("server: a hand-over chunk of %d bytes", n)
		}
		cr.left, cr.max = n, cr.max-n
	}
	k, err := cr.r.Read(p[:min(len(p), cr.left)])
	cr.left -= k
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

// drain reads the stream to its end, so that what follows can be read.
func (cr *chunkReader) drain() error {
	_, err := io.Copy(io.Discard, cr)
	return err
}
