package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// TakeoverResult is what a daemon took over ([TakeOver]): its service, its
// server, serving the connections it was handed already, and the
// listening sockets, for the caller to [Server.Serve].
type TakeoverResult struct {
	Service   *keys.Service
	Server    *Server
	Listeners []*net.UnixListener
	// Keys, Procs, Conns count what was handed over.
	Keys, Procs, Conns int
	// Seccomp has a channel for each seccomp listener handed over,
	// closed once it is no longer served (as StartListener's), or at
	// once if it is not served at all.
	Seccomp []<-chan struct{}
	// SeccompTags are their tags (Server.StartListener), in that order.
	SeccompTags []string
}

// ErrNothingToTakeOver is returned by [TakeOver] when no daemon answers at
// the socket.
var ErrNothingToTakeOver = errors.New("server: no daemon to take over from")

// takeoverIOTimeout bounds each read and write of a hand-over.
const takeoverIOTimeout = 2 * time.Minute

// maxRecords bounds the server's records in a hand-over.
const maxRecords = 256 << 20

// TakeOver takes over from the daemon serving the socket at path
// (handover.go): it receives its listeners, its clients' connections,
// every key (into a service made with keyOpts) and its records, and
// serves the connections with a [Server] configured by cfg. The caller
// serves the listeners ([Server.Serve]). The old daemon exits once TakeOver
// returns; if TakeOver fails, the old daemon serves on, untouched.
func TakeOver(path string, keyOpts []keys.Option, cfg Config) (*TakeoverResult, error) {
	return takeOver(path, keyOpts, cfg, takeoverFault{})
}

// ErrVersions is returned by [TakeOver] when the old daemon's state is of a
// later version than this daemon reads.
var ErrVersions = errors.New("server: the old daemon's state is of a later version than this daemon reads (versions too far apart): not taking over")

// takeoverFault makes a hand-over fail on purpose, for the tests: a taker
// that claims to read an earlier version only, or one that dies once it
// has the descriptors.
type takeoverFault struct {
	stateVersion   int
	setState       bool
	hangUpAfterFDs bool
}

func takeOver(path string, keyOpts []keys.Option, cfg Config, fault takeoverFault) (*TakeoverResult, error) {
	// Reading the state makes every key anew, which a collection would
	// only mark: Go's collector waits until the keys are made.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fd, err := sock.Socket()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s", ErrNothingToTakeOver, path)
		}
		return nil, fmt.Errorf("server: taking over at %s: %w", path, err)
	}
	tv := unix.NsecToTimeval(takeoverIOTimeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
	// Keys come only from a daemon of this user (or root).
	peer, err := peerCredFD(fd)
	if err != nil {
		return nil, err
	}
	if peer.UID != uint32(os.Geteuid()) && peer.UID != 0 {
		return nil, fmt.Errorf("server: the daemon at %s runs as uid %d, not as this one's %d: not taking over", path, peer.UID, os.Geteuid())
	}
	t := &takeover{fd: fd}
	sv := keys.StateVersion
	if fault.setState {
		sv = fault.stateVersion
	}
	if err := t.ask(sv); err != nil {
		return nil, err
	}
	fds, err := t.receiveFDs()
	defer func() { closeFDs(fds) }()
	if err != nil {
		return nil, err
	}
	if fault.hangUpAfterFDs {
		return nil, errors.New("server: hanging up on purpose")
	}
	rs, rec, err := readState(t, "handed over", keyOpts)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			abandonImport(rs)
			rec.wipeUnread() // no connection resumes
		}
	}()
	if rec.Listeners < 0 || rec.Listeners > len(fds) {
		return nil, fmt.Errorf("server: %d listeners handed over, with %d descriptors", rec.Listeners, len(fds))
	}
	res := &TakeoverResult{Service: rs.Service()}
	s := New(rs.Service(), cfg)
	res.Server = s
	// On failure, this daemon's copies of the listening sockets close
	// without removing their name: the old daemon serves on them.
	closeListeners := func() {
		for _, l := range res.Listeners {
			l.SetUnlinkOnClose(false)
			l.Close()
		}
	}
	for i := 0; i < rec.Listeners; i++ {
		ln, err := ListenerFrom(fds[i])
		fds[i] = -1
		if err != nil {
			closeListeners()
			return nil, err
		}
		res.Listeners = append(res.Listeners, ln)
	}
	startExtra, err := s.readExtra(t, rec, fds[rec.Listeners:])
	if err != nil {
		closeListeners()
		return nil, err
	}
	start, err := s.restore(rs, rec, fds[rec.Listeners:], res)
	if err != nil {
		startExtra(false)
		closeListeners()
		return nil, err
	}
	res.Keys = rs.Service().Keys()
	rs.Done()
	if cfg.BeforeTakeover != nil {
		cfg.BeforeTakeover()
	}
	// The old daemon lets go once it reads this: from then on the
	// sockets are this daemon's alone.
	if _, err := unix.Write(fd, []byte{'K'}); err != nil {
		start(false) // the connections' unread bytes go
		startExtra(false)
		s.abandonRestored()
		closeListeners()
		return nil, fmt.Errorf("server: telling the old daemon: %w", err)
	}
	ok = true
	start(true)
	startExtra(true)
	return res, nil
}

// Thaw makes a server again from what [Server.Freeze] wrote (r) and the
// descriptors it returned (fds, taken), serving the connections at once;
// the caller serves the listening sockets, which it has by other means.
func Thaw(r io.Reader, fds []int, keyOpts []keys.Option, cfg Config) (*TakeoverResult, error) {
	res, start, err := ThawHeld(r, fds, keyOpts, cfg)
	if err != nil {
		return nil, err
	}
	start(true)
	return res, nil
}

// ThawHeld is Thaw serving nothing until start(true) (the hand-over's
// other side has let go: the seccomp agent's namespaces, restored inside
// the daemon's own hand-over); start(false) drops what it made, and its
// descriptors, which are the other side's still.
func ThawHeld(r io.Reader, fds []int, keyOpts []keys.Option, cfg Config) (*TakeoverResult, func(serve bool), error) {
	res, start, err := thaw(r, fds, keyOpts, cfg)
	if err != nil {
		return nil, nil, err
	}
	return res, func(serve bool) {
		start(serve)
		if !serve {
			res.Server.abandonRestored()
		}
	}, nil
}

func thaw(r io.Reader, fds []int, keyOpts []keys.Option, cfg Config) (*TakeoverResult, func(bool), error) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer func() { closeFDs(fds) }()
	rs, rec, err := readState(r, "kept", keyOpts)
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			abandonImport(rs)
			rec.wipeUnread() // no connection resumes
		}
	}()
	if rec.Listeners != 0 {
		return nil, nil, fmt.Errorf("server: the records kept name %d listening sockets", rec.Listeners)
	}
	res := &TakeoverResult{Service: rs.Service()}
	s := New(rs.Service(), cfg)
	res.Server = s
	startExtra, err := s.readExtra(r, rec, fds)
	if err != nil {
		return nil, nil, err
	}
	start, err := s.restore(rs, rec, fds, res)
	if err != nil {
		startExtra(false)
		return nil, nil, err
	}
	res.Keys = rs.Service().Keys()
	rs.Done()
	ok = true
	return res, func(serve bool) {
		start(serve)
		startExtra(serve)
	}, nil
}

// maxExtra bounds the caller's section of a hand-over (the seccomp
// agent's: every container's keys).
const maxExtra = 1 << 40

// readExtra reads the caller's section, if the records say one follows
// (Config.TakeOverExtra), and takes its descriptors out of fds; without
// a hook to read it, it is skipped and its descriptors closed. It returns
// what starts (or drops) what the hook made.
func (s *Server) readExtra(r io.Reader, rec *handoverRecords, fds []int) (func(serve bool), error) {
	none := func(bool) {}
	if rec.Extra == nil {
		return none, nil
	}
	x := *rec.Extra
	if x.FD < 0 || x.FDs < 0 || x.FDs > len(fds) || x.FD > len(fds)-x.FDs {
		return nil, fmt.Errorf("server: the extra section's %d descriptors from %d, with %d", x.FDs, x.FD, len(fds))
	}
	mine := make([]int, x.FDs)
	copy(mine, fds[x.FD:x.FD+x.FDs])
	for i := x.FD; i < x.FD+x.FDs; i++ {
		fds[i] = -1
	}
	er := &chunkReader{r: r, max: maxExtra}
	if s.cfg.TakeOverExtra == nil {
		s.log.Warn("ukeyd: the state carries a section this daemon has nothing to read it with (a seccomp agent's containers?): dropped")
		closeFDs(mine)
		return none, er.drain()
	}
	start, err := s.cfg.TakeOverExtra(er, mine)
	if err == nil {
		err = er.drain()
		if err != nil {
			start(false)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("server: the extra section: %w", err)
	}
	return start, nil
}

// wipeUnread wipes and frees the connections' unread bytes, which may
// hold payloads, for records that will not be served.
func (rec *handoverRecords) wipeUnread() {
	for i := range rec.Conns {
		secmem.Free(rec.Conns[i].Unread)
		rec.Conns[i].Unread = nil
	}
}

// closeFDs closes the descriptors received and not taken (-1).
func closeFDs(fds []int) {
	for _, f := range fds {
		if f >= 0 {
			unix.Close(f)
		}
	}
}

// abandonImport undoes an import that will not be served: the keys read
// are dropped (their payloads wiped) and the service closed.
func abandonImport(rs *keys.Restore) {
	rs.Done()
	rs.Service().Close()
}

// readState reads the keys' state stream and the records that follow it
// (writeState), and checks the records' version; what names the state
// for errors ("handed over", "kept"). On error nothing is left of the
// keys read.
func readState(r io.Reader, what string, keyOpts []keys.Option) (*keys.Restore, *handoverRecords, error) {
	kr := &chunkReader{r: r, max: 1<<62 - 1}
	rs, err := keys.Import(kr, keyOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("server: the keys %s: %w", what, err)
	}
	var rec handoverRecords
	fail := func(err error) (*keys.Restore, *handoverRecords, error) {
		abandonImport(rs)
		rec.wipeUnread()
		return nil, nil, fmt.Errorf("server: the records %s: %w", what, err)
	}
	if err := kr.drain(); err != nil {
		return fail(err)
	}
	// The records are read whole into a buffer of ours, which is wiped
	// once decoded: a connection's unread bytes may hold a payload.
	b, err := readAllWiping(&chunkReader{r: r, max: maxRecords})
	defer clear(b)
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return fail(err)
	}
	// Then each connection's unread bytes, in turn.
	ur := &chunkReader{r: r, max: (wire.MaxFrame + 4) * max(len(rec.Conns), 1)}
	for i := range rec.Conns {
		n := rec.Conns[i].UnreadLen
		if n < 0 || n > wire.MaxFrame+4 {
			return fail(fmt.Errorf("connection record %d: %d unread bytes", i, n))
		}
		// In the arena (locked, never dumped): they may hold a payload.
		// Freed by wipeUnread, or by the connection that resumes (run2).
		if n > 0 {
			rec.Conns[i].Unread = secmem.Alloc(n)
		}
		if _, err := io.ReadFull(ur, rec.Conns[i].Unread); err != nil {
			return fail(err)
		}
	}
	if err := ur.drain(); err != nil {
		return fail(err)
	}
	if rec.Version < 1 || rec.Version > HandoverVersion {
		return fail(fmt.Errorf("version %d, where this daemon reads 1 to %d", rec.Version, HandoverVersion))
	}
	return rs, &rec, nil
}

// readAllWiping is io.ReadAll, wiping each buffer it outgrows: what it
// reads may hold payloads.
func readAllWiping(r io.Reader) ([]byte, error) {
	b := make([]byte, 0, 64<<10)
	for {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), 2*cap(b))
			copy(nb, b)
			clear(b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// takeover is the new daemon's end of a hand-over connection: a blocking
// socket, read exactly, so that descriptors are received with the bytes
// they come with.
type takeover struct {
	fd int
}

func (t *takeover) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(t.fd, p)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (t *takeover) writeAll(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(t.fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// frame reads one frame of the wire protocol.
func (t *takeover) frame(max int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(t, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n > max {
		return nil, fmt.Errorf("server: a frame of %d bytes from the old daemon", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(t, b)
	return b, err
}

// ask says hello and asks to take over, and reads the answer.
func (t *takeover) ask(stateVersion int) error {
	var out sock.Frames
	out.Body(wire.EncodeHello(wire.Version))
	var req wire.Request
	if err := req.Set(wire.OpTakeover, wire.Int(HandoverVersion), wire.Int(int64(stateVersion))); err != nil {
		return err
	}
	req.Tag = 1
	if err := out.Request(&req); err != nil {
		return err
	}
	if err := t.writeAll(out.Bytes()); err != nil {
		return fmt.Errorf("server: asking to take over: %w", err)
	}
	hello, err := t.frame(wire.MaxHello)
	if err != nil {
		return fmt.Errorf("server: the old daemon's hello: %w", err)
	}
	if _, err := wire.DecodeHello(hello); err != nil {
		return fmt.Errorf("server: the old daemon's hello: %w", err)
	}
	b, err := t.frame(4096)
	if err != nil {
		return fmt.Errorf("server: the old daemon's answer: %w", err)
	}
	resp, err := wire.DecodeResponse(b)
	if err != nil {
		return fmt.Errorf("server: the old daemon's answer: %w", err)
	}
	switch e := keys.Errno(resp.Errno); e {
	case 0:
		return nil
	case keys.EPERM:
		return fmt.Errorf("server: the old daemon refuses a hand-over to a process less privileged than itself (another user, another user namespace, or fewer capabilities; see its log)")
	case keys.EPROTONOSUPPORT:
		return ErrVersions
	case keys.EOPNOTSUPP:
		return fmt.Errorf("server: the old daemon holds what cannot be handed over (seccomp listeners, key watches; see its log)")
	case keys.EBUSY:
		return fmt.Errorf("server: the old daemon is busy (connections or request-key upcalls did not finish in time, or another hand-over is under way); try again")
	default:
		return fmt.Errorf("server: the old daemon refused: %v", e)
	}
}

// receiveFDs receives the descriptors, in batches of a 4-byte count each
// (sendHandover), the last one empty.
func (t *takeover) receiveFDs() ([]int, error) {
	var fds []int
	oob := make([]byte, unix.CmsgSpace(4*maxFDsPerMessage))
	for {
		var head [4]byte
		got := 0
		var batch []int
		for got < len(head) {
			n, oobn, _, _, err := unix.Recvmsg(t.fd, head[got:], oob, sock.RecvFlags)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fds, fmt.Errorf("server: receiving descriptors: %w", err)
			}
			if n == 0 {
				return fds, fmt.Errorf("server: the old daemon hung up while sending descriptors")
			}
			got += n
			if oobn > 0 {
				msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
				if err == nil {
					for i := range msgs {
						if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
							for _, f := range r {
								unix.CloseOnExec(f)
							}
							batch = append(batch, r...)
						}
					}
				}
			}
		}
		fds = append(fds, batch...)
		want := int(binary.BigEndian.Uint32(head[:]))
		if want != len(batch) {
			return fds, fmt.Errorf("server: %d descriptors announced, %d received", want, len(batch))
		}
		if want == 0 {
			return fds, nil
		}
	}
}

// ListenerFrom makes a listening socket of a descriptor handed over
// (taken: it is closed whatever happens), or fails for one that did not
// come (-1). The listener removes the socket's name when it closes, as
// one made by [Listen] does. The seccomp agent's socket comes the same
// way in the agent's own section of the hand-over.
func ListenerFrom(fd int) (*net.UnixListener, error) {
	if fd < 0 {
		return nil, errors.New("server: a listening socket did not come")
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	u, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("server: a listener of type %T handed over", ln)
	}
	u.SetUnlinkOnClose(true)
	return u, nil
}

// restore makes the server's processes, sessions, logins and connections
// again from what was handed over, conns being the connections'
// descriptors (taken). It returns the function that starts serving the
// connections, once the old daemon has let go of them (serve), or wipes
// and frees their unread bytes where they will not be served.
func (s *Server) restore(rs *keys.Restore, rec *handoverRecords, conns []int, res *TakeoverResult) (_ func(serve bool), err error) {
	type resumed struct {
		c       *conn
		version uint16
		unread  []byte
	}
	var toStart []resumed
	defer func() {
		// A connection's unread bytes may hold a payload. A connection
		// that resumes takes its own from the record and wipes them once
		// read (run2); the others' are wiped here, and, when the
		// hand-over fails, those of the connections that will not run.
		rec.wipeUnread()
		if err != nil {
			for _, r := range toStart {
				secmem.Free(r.unread)
			}
		}
	}()
	ucs := make(map[int]*net.UnixConn)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if err == nil {
			return
		}
		// Nothing made so far is kept: the connections and the
		// processes' handles and keyrings go.
		for _, uc := range ucs {
			uc.Close()
		}
		s.procs.abandonLocked()
	}()
	// The connections first: a process that has one is identified by it
	// (SO_PEERPIDFD), which no reused pid can fool.
	for i, cr := range rec.Conns {
		if cr.FD < 0 || cr.FD >= len(conns) || conns[cr.FD] < 0 {
			// Its descriptor did not come (a store that lost it): the
			// connection is gone, and its client sees it closed.
			s.log.Warn("ukeyd: a connection handed over came without its descriptor", "record", i, "fd", cr.FD, "descriptors", len(conns))
			continue
		}
		f := os.NewFile(uintptr(conns[cr.FD]), "conn")
		conns[cr.FD] = -1
		nc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		uc, ok := nc.(*net.UnixConn)
		if !ok {
			nc.Close()
			return nil, fmt.Errorf("server: a connection of type %T handed over", nc)
		}
		ucs[i] = uc
	}
	byPID := make(map[int]*net.UnixConn)
	for i, cr := range rec.Conns {
		if cr.PID > 0 && ucs[i] != nil {
			byPID[cr.PID] = ucs[i]
		}
	}
	n, err := s.restoreProcsLocked(rs, rec.Procs, byPID)
	if err != nil {
		return nil, err
	}
	res.Procs += n
	s.tokens.restore(rs, rec.Sessions)
	s.logins.restoreLocked(rs, rec.Logins)
	for i, cr := range rec.Conns {
		uc := ucs[i]
		if uc == nil {
			continue // came without its descriptor
		}
		cred, err := peerCred(uc)
		if err != nil {
			uc.Close()
			continue
		}
		var p *proc
		switch {
		case cr.Private != nil:
			p, err = s.restoredProc(rs, cr.Private)
			if err != nil {
				return nil, err
			}
			p.handle, p.private, p.tracked, p.charge = process.Handle{}, true, true, cred.UID
			s.usage.restoreProc(p.charge)
		default:
			p = s.procs.lookup(cred.PID)
			if p == nil || cr.PID != cred.PID {
				// Its process is gone (or the record lies): the
				// connection ends.
				uc.Close()
				continue
			}
		}
		if len(cr.Unread) > wire.MaxFrame+4 {
			uc.Close()
			continue
		}
		p.conns++
		pc := p.caller.Cred()
		cred.Caps, cred.CapsKnown = pc.Caps, pc.CapsKnown
		if pc.CapsIf != 0 && !p.private {
			// Its last call was intercepted, whose capabilities are
			// learnt only at a check: read them as a connection made
			// again reads them (Server.accept), and the process's
			// caller, which its connections act as, has them.
			cred.Caps, cred.CapsKnown = p.handle.Capabilities(cred.UID)
			if !sameCred(&pc, &cred) {
				p.caller.SetCred(cred)
			}
		}
		c := newConn(s, uc, cred, p, p.charge)
		if cr.Watch != nil {
			c.watch.Store(rs.WatchQueue(*cr.Watch, watchQueueSize))
		}
		s.conns[c] = struct{}{}
		s.usage.restoreConn(c.charge)
		s.wg.Add(1)
		toStart = append(toStart, resumed{c: c, version: cr.Version, unread: cr.Unread})
		rec.Conns[i].Unread = nil // the connection's now
		res.Conns++
	}
	for _, p := range s.procs.byPID {
		if p.conns == 0 {
			s.linger(p)
		}
	}
	type seccompStart struct {
		fd     int
		uid    uint32
		notify bool
		tag    string
	}
	var listeners []seccompStart
	for i, sr := range rec.Seccomp {
		if sr.FD < 0 || sr.FD >= len(conns) || conns[sr.FD] < 0 {
			s.log.Warn("ukeyd: a seccomp listener handed over came without its descriptor", "record", i, "fd", sr.FD, "descriptors", len(conns))
			continue
		}
		listeners = append(listeners, seccompStart{fd: conns[sr.FD], uid: sr.UID, notify: sr.Notify, tag: sr.Tag})
		conns[sr.FD] = -1
	}
	served := make([]chan struct{}, len(listeners))
	for i := range served {
		served[i] = make(chan struct{})
		res.Seccomp = append(res.Seccomp, served[i])
		res.SeccompTags = append(res.SeccompTags, listeners[i].tag)
	}
	// Notification pipes, with the watches through which keys post to
	// them: their readers read on.
	type adoptedPipe struct {
		p *intercept.WatchPipe
		q *keys.WatchQueue
	}
	var adopted []adoptedPipe
	for i, pr := range rec.Pipes {
		if pr.FD < 0 || pr.FD >= len(conns) || conns[pr.FD] < 0 {
			s.log.Warn("ukeyd: a notification pipe handed over came without its descriptor", "record", i, "fd", pr.FD, "descriptors", len(conns))
			continue
		}
		fd := conns[pr.FD]
		conns[pr.FD] = -1
		var give func()
		if pr.Charged && s.usage.admitProc(pr.UID) == 0 {
			uid := pr.UID
			give = func() {
				s.mu.Lock()
				s.usage.dropProc(uid)
				s.mu.Unlock()
			}
		}
		p, err := intercept.AdoptWatchPipe(fd, pr.State, give)
		if err != nil {
			if give != nil {
				s.usage.dropProc(pr.UID)
			}
			s.log.Warn("ukeyd: a notification pipe handed over cannot be served", "err", err)
			continue
		}
		ap := adoptedPipe{p: p}
		if pr.Watch != nil {
			ap.q = rs.WatchSink(*pr.Watch, p.Post)
			s.adoptPipeLocked(p, ap.q, pr.UID)
		}
		adopted = append(adopted, ap)
	}
	return func(serve bool) {
		if !serve {
			for _, r := range toStart {
				secmem.Free(r.unread)
			}
			// The old daemon serves on, with the pipes: this one's
			// copies go.
			for _, ap := range adopted {
				ap.p.Close()
			}
			for i, l := range listeners {
				closeFD(l.fd)
				close(served[i])
			}
			return
		}
		for _, ap := range adopted {
			if ap.q != nil {
				s.untilPipeEnds(ap.p, ap.q)
			}
		}
		for _, r := range toStart {
			s.cfg.Metrics.ConnOpened()
			go r.c.run2(r.version, r.unread)
		}
		for i, l := range listeners {
			done, err := s.startListener(l.fd, listenerInfo{uid: l.uid, notify: l.notify, tag: l.tag}, intercept.HandlerFunc(s.intercepted))
			if err != nil {
				s.log.Warn("ukeyd: a seccomp listener handed over cannot be served", "uid", l.uid, "err", err)
				close(served[i])
				continue
			}
			go func() { <-done; close(served[i]) }()
		}
	}, nil
}

// abandonRestored lets go of what restore made, when the old daemon did
// not hear that this one took over: it serves on, and this daemon must
// not touch the connections.
func (s *Server) abandonRestored() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.conns = make(map[*conn]struct{})
	s.mu.Unlock()
	for _, c := range conns {
		c.uc.Close()
		s.wg.Done()
	}
	s.Shutdown(context.Background())
}
