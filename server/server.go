package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/ratelimit"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// Config tunes a [Server]. The zero value is usable: every field has a
// default.
type Config struct {
	// Logger receives structured logs; never payloads.
	Logger *slog.Logger
	// ReadTimeout bounds how long a connection may stay silent between
	// requests (default 5 minutes) and how long a request may take to
	// arrive once begun.
	ReadTimeout time.Duration
	// WriteTimeout bounds how long an answer may take to leave (default
	// 10 seconds): a client that stops reading loses its connection
	// instead of pinning it.
	WriteTimeout time.Duration
	// Spin is how long a connection whose client polls ([wire.Polls])
	// polls for the client's next request before its goroutine sleeps
	// ([sock.Conn.SetSpin]), once a request has come within it: a client
	// calling in a tight loop then costs no sleep and wake-up of the
	// daemon's thread per call. Default [sock.DefaultSpin]; negative:
	// never.
	Spin time.Duration
	// Limits bounds what callers can make the daemon hold; zero fields
	// take [DefaultLimits] for the process's descriptor limit.
	Limits Limits
	// Metrics, if set, observes operation counts and latencies.
	Metrics Observer
	// Helper, if set, is the request-key helper that the keys.Service was
	// given ([keys.WithUpcall]): [New] binds it to the server, which serves
	// its helpers' tokens. It must be given to New before any request_key
	// can reach the Service.
	Helper *Helper
	// ProcessPoll is how often the daemon checks whether client processes
	// that have closed all their connections still exist (default 1
	// second); their keyrings are released once they do not.
	ProcessPoll time.Duration
	// NoLogins turns off login sessions (login.go): a process without a
	// session then falls back to its user-session keyring, as the
	// kernel's does. The seccomp agent's servers, one per container,
	// have none: a container has no login.
	NoLogins bool
	// CanHandOver, if set, is asked before a hand-over begins; an error
	// refuses it (EOPNOTSUPP), saying why in the log.
	CanHandOver func() error
	// HandOverExtra, if set, is asked in a hand-over or a Freeze, once
	// everything of this server is parked, for a section of the
	// caller's own that goes after the server's state: it writes the
	// section to w and returns the descriptors the section names (which
	// stay its own: the next daemon gets copies, in that order), and
	// done, called once the hand-over is decided (handedOver: the next
	// daemon has everything; else this one serves on). An error
	// abandons the hand-over. ukeyd's seccomp agent hands over its
	// containers' namespaces this way (package agent, Agent.HandOver).
	HandOverExtra func(w io.Writer) (fds []int, done func(handedOver bool), err error)
	// TakeOverExtra, if set, reads that section on the new daemon's
	// side (TakeOver, Thaw, ThawHeld): r is the section, fds its
	// descriptors (taken; -1 for one that did not come); it returns
	// start, called once the old daemon has let go (serve) or the
	// take-over has failed (the section's descriptors are then the old
	// daemon's again). A state without a section (an earlier daemon's,
	// or one without a hook) calls nothing.
	TakeOverExtra func(r io.Reader, fds []int) (start func(serve bool), err error)
	// BeforeTakeover, if set, runs when [TakeOver] has everything the old
	// daemon handed over and is about to tell it to let go: ukeyd tells
	// systemd there that it is the service's main process now, before
	// the old one exits.
	BeforeTakeover func()

	// Member, if set, says whether a process whose intercepted call the
	// server meets is one it serves; any other is refused EPERM. It
	// exists for the seccomp agent (package agent), whose container
	// namespaces serve only the container's own processes, whatever
	// listener their calls come through.
	Member func(pid int) bool
	// Namespaces, if set, returns the key namespaces the seccomp agent
	// serves beside the daemon's own (package agent's
	// Agent.Namespaces), which the daemon's status lists to a
	// caller as privileged as the daemon, and to no other: a
	// container's id is not for another container to learn.
	Namespaces func() []wire.NamespaceStatus
	// Pool, if set, is what the server's tracked processes and listeners
	// count against besides [Limits.MaxProcs], shared with other Servers
	// ([Pool]): the seccomp agent's bound for every container's
	// namespace together.
	Pool *Pool
	// Expensive, if set, are the slots the server's expensive operations
	// take, shared with other Servers ([Slots]; the seccomp agent's
	// containers take the daemon's); they then bound them, not
	// [Limits.MaxExpensive]. Default: slots of the server's own,
	// Limits.MaxExpensive of them.
	Expensive *Slots
}

// Server serves a [keys.Service] to clients on Unix sockets.
//
// Its state is in tables, each in its file with the records it hands
// over (handover.go) and restores (takeover.go) beside it: procs (the
// client processes, their tombs and the fork connector: process.go,
// forks.go), tokens (session and helper tokens: tokens.go, helper.go),
// logins (login.go) and usage (what each uid holds, against the bounds:
// limits.go). The tables are plain structs under the one mutex mu, so
// that what spans them (a process that ends drops its usage, its
// session's tokens and logins) changes at once; what is not under it
// says so.
type Server struct {
	svc *keys.Service
	cfg Config
	log *slog.Logger

	// expensiveHook, if set (by tests, under mu), is told as each
	// expensive operation starts and ends, holding its slots.
	expensiveHook func(uid uint32, start bool)

	// serving counts the requests being served (not those that wait for
	// a helper or a notification); a connection's poll is not granted
	// while it is above 0 (spin.go), and spinCut counts the polls so
	// refused or cut short. spinNow is the clock of the budgets of
	// polling.
	serving atomic.Int64
	spinCut atomic.Int64
	spinNow func() time.Time

	refusals ratelimit.Limiter // of the log lines about refused connections
	failures ratelimit.Limiter // of the log lines about failed accepts

	// ho is the hand-over under way, if any (handover.go), under mu;
	// handedOver closes once one has succeeded.
	ho         *handover
	handedOver chan struct{}

	mu       sync.Mutex
	procs    processTable // client processes, tombs, forks (process.go, forks.go)
	tokens   tokenTable   // session and helper tokens (tokens.go)
	logins   loginTable   // login keyrings (login.go); it also has a mutex of its own
	usage    usageTable   // what each uid holds, against the bounds (limits.go)
	conns    map[*conn]struct{}
	lns      []net.Listener
	closing  bool
	wg       sync.WaitGroup
	watchers sync.WaitGroup
	// listeners are the seccomp listeners served (intercept.go).
	listeners map[*intercept.Listener]listenerInfo
	// pipes are the notification pipes made for intercepted programs
	// that this server's keys post to, each through a queue of its own
	// (pipeQueue).
	pipes   map[*intercept.WatchPipe]watchPipe
	stop    chan struct{} // closed by Shutdown
	abort   chan struct{} // closed when Shutdown's context ends: helpers are killed
	aborted bool
}

// New returns a server for svc.
func New(svc *keys.Service, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 5 * time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopObserver{}
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.ProcessPoll <= 0 {
		cfg.ProcessPoll = time.Second
	}
	if cfg.Spin == 0 {
		cfg.Spin = sock.DefaultSpin
	}
	s := &Server{
		svc:        svc,
		cfg:        cfg,
		log:        cfg.Logger,
		spinNow:    time.Now,
		refusals:   ratelimit.Limiter{Interval: 10 * time.Second, Burst: 5},
		failures:   ratelimit.Limiter{Interval: 10 * time.Second, Burst: 5},
		procs:      newProcessTable(),
		tokens:     newTokenTable(),
		logins:     newLoginTable(),
		usage:      newUsageTable(cfg.Limits.WithDefaults(), cfg.Pool, cfg.Expensive),
		handedOver: make(chan struct{}),
		conns:      make(map[*conn]struct{}),
		stop:       make(chan struct{}),
		abort:      make(chan struct{}),
	}
	if cfg.Helper != nil {
		cfg.Helper.server = s
	}
	return s
}

// ErrClosed is returned by [Server.Serve] after [Server.Shutdown].
var ErrClosed = errors.New("server: closed")

// Serve accepts connections on ln until [Server.Shutdown]. It returns
// [ErrClosed] after a shutdown, or the listener's error once the listener is
// closed by someone else. Any other error of accept (a full descriptor
// table, EMFILE, above all) never ends the service: Serve backs off, from 5
// ms up to a second, and tries again, as net/http does, while the
// connections it serves go on and free what the table needs.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	s.procs.forks.once.Do(func() {
		s.checkProc()
		s.probeForks()
	})
	var delay time.Duration
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ho := s.acceptParked(); ho != nil {
				// A hand-over (handover.go): the listener goes with it,
				// or accepting resumes.
				<-ho.done
				if ho.ok {
					return ErrHandedOver
				}
				continue
			}
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logLimited(&s.failures, "ukeyd: accept failed; retrying", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.stop:
			}
			continue
		}
		delay = 0
		s.accept(c)
	}
}

// logRefusal logs a refused connection, at most a few lines per interval
// however many there are.
func (s *Server) logRefusal(msg string, args ...any) {
	s.logLimited(&s.refusals, msg, args...)
}

// logLimited logs msg unless lim has let through enough lately.
func (s *Server) logLimited(lim *ratelimit.Limiter, msg string, args ...any) {
	ok, suppressed := lim.Allow(time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	s.log.Warn(msg, args...)
}

// refuse tells the caller why it is not served, and closes. The refusal
// is a dozen bytes written to a socket that has just been accepted, whose
// buffer is empty: it does not block the accept loop.
func (s *Server) refuse(uc *net.UnixConn, cred keys.Cred, errno keys.Errno, what string) {
	s.cfg.Metrics.Refused()
	s.logRefusal("ukeyd: refusing connection", "uid", cred.UID, "pid", cred.PID, "reason", what, "errno", errno.Error())
	uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_ = wire.WriteFrame(uc, wire.EncodeRefusal(uint16(errno)))
	uc.Close()
}

func (s *Server) accept(uc *net.UnixConn) {
	cred, err := peerCred(uc)
	if err != nil {
		s.logRefusal("ukeyd: cannot learn peer credentials; closing", "err", err)
		uc.Close()
		return
	}
	// A process the daemon meets for the first time inherits from its
	// ancestry (ancestry.go), which is read before the lock is taken.
	s.mu.Lock()
	p := s.procs.lookup(cred.PID)
	known := p != nil && !p.ghost && p.caller.Cred().UID == cred.UID && !p.handle.Exited()
	ghostAlive := p != nil && p.ghost && p.start != "" && !p.handle.Exited()
	newProc := p == nil
	charge := cred.UID
	if known {
		charge = p.charge
	}
	s.mu.Unlock()
	// A process met for the first time is pinned (its pidfd) and charged
	// to the owner of its user namespace (chargeUID).
	var handle process.Handle // closed below if unused
	opened := false
	defer func() {
		if opened {
			handle.Close()
		}
	}()
	if !known && cred.PID > 0 {
		handle, opened = process.Open(uc, cred.PID), true
		charge = chargeUID(cred, &handle)
	}
	// Refused now, if it would be below, before its ancestry is read.
	s.mu.Lock()
	errno, why := s.usage.refusal(charge, newProc)
	s.mu.Unlock()
	if errno != 0 {
		s.refuse(uc, cred, errno, why)
		return
	}
	var start string
	var ancestors []procID
	if !known && cred.PID > 0 {
		// Forks are followed from before a new process is kept. (A
		// known one keeps them followed; if it turns out gone below, its
		// successor is kept long before the idle delay runs out.)
		s.holdForks()
		defer s.unholdForks()
		if ghostAlive {
			start, ancestors = s.ghostStart(p, &handle)
		} else {
			start, ancestors = s.inheritance(cred.PID)
		}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		uc.Close()
		return
	}
	if e := s.usage.admitConn(charge); e != 0 {
		s.mu.Unlock()
		s.refuse(uc, cred, e, "too many connections")
		return
	}
	var ended, ghost *proc
	p = s.procs.lookup(cred.PID)
	if p != nil && p.ghost && !p.handle.Exited() {
		// Its first connection: the process the daemon kept since it
		// saw it forked (or gave it a session) becomes a client with
		// credentials of its own, and keeps what it inherited, whatever
		// uid an exec has given it since.
		ghost = p
		s.dropProcLocked(p)
		ended = p
		p = nil
	} else if p != nil && (p.caller.Cred().UID != cred.UID || p.handle.Exited()) {
		// The pid belonged to a process that is gone: its keyrings go now
		// (or with its last connection), and this is a new process.
		s.dropProcLocked(p)
		if p.conns == 0 {
			ended = p
		}
		p = nil
	}
	if p == nil {
		if e := s.usage.admitProc(charge); e != 0 {
			s.usage.dropConn(charge)
			s.mu.Unlock()
			if ended != nil {
				ended.end()
			}
			s.refuse(uc, cred, e, "too many client processes")
			return
		}
		p = &proc{tracked: true, charge: charge}
		if cred.PID > 0 {
			if opened {
				p.handle, opened = handle, false
			} else {
				p.handle = process.Open(uc, cred.PID)
			}
			// The kernel checks capabilities, not uid 0: learnt when
			// the daemon meets the process, and again at each of its
			// later connections (below).
			cred.Caps, cred.CapsKnown = p.handle.Capabilities(cred.UID)
			p.caller = s.svc.NewCaller(cred)
			p.start = start
			if ghost != nil {
				p.inherited.Store(inherit(p, ghost.caller))
			} else {
				p.inherited.Store(s.inheritLocked(p, ancestors))
			}
			s.procs.add(cred.PID, p)
		} else {
			// A caller in a pid namespace the daemon cannot see: its pid
			// says nothing, so it is a process of its own for as long as
			// this connection lasts, and shares nothing with others. Its
			// capabilities cannot be read either (nor its user
			// namespace): it has none, whatever its uid, or a container's
			// root stripped of them would have them all here.
			cred.Caps, cred.CapsKnown = 0, true
			p.caller = s.svc.NewCaller(cred)
			p.handle = process.Handle{}
			p.private = true
		}
	} else if cred.PID > 0 {
		// A process met before connects again. The kernel checks the
		// credentials a task has at each call, and this one's gid,
		// groups or capabilities may have changed since it was met
		// (setgroups, capset, an exec through setpriv): it has the
		// new connection's from now on, on every connection.
		cred.Caps, cred.CapsKnown = p.handle.Capabilities(cred.UID)
		if old := p.caller.Cred(); !sameCred(&old, &cred) {
			p.caller.SetCred(cred)
		}
	}
	p.conns++
	c := newConn(s, uc, cred, p, charge)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if ended != nil {
		ended.end()
	}
	s.cfg.Metrics.ConnOpened()
	go c.serve()
}

// release undoes accept's bookkeeping when a connection ends.
func (s *Server) release(c *conn) {
	defer s.connEnded(c)
	s.mu.Lock()
	delete(s.conns, c)
	s.usage.dropConn(c.charge)
	c.proc.conns--
	var ended *proc
	if c.proc.conns == 0 {
		switch {
		case c.proc.private:
			s.dropProcLocked(c.proc)
			ended = c.proc
		case s.procs.lookup(c.cred.PID) != c.proc:
			ended = c.proc // displaced by a new process with its pid
		case s.closing || c.proc.handle.Leaving():
			s.dropProcLocked(c.proc)
			s.entombLocked(c.proc)
			ended = c.proc
		default:
			// The process lives on without a connection: it keeps its
			// keyrings until it exits.
			s.linger(c.proc)
		}
		if ended != nil {
			s.pruneTokens()
		}
	}
	s.mu.Unlock()
	if ended != nil {
		ended.end() // the process's keyrings go with it
	}
	s.cfg.Metrics.ConnClosed()
	s.wg.Done()
}

// Shutdown stops accepting, lets in-flight requests finish, closes every
// connection and waits for them, or gives up when ctx ends. Then it
// releases the keyrings of every client process.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		close(s.stop)
	}
	s.closing = true
	for _, ln := range s.lns {
		ln.Close()
	}
	s.procs.forks.stopLocked()
	listeners := make([]*intercept.Listener, 0, len(s.listeners))
	for l := range s.listeners {
		listeners = append(listeners, l)
	}
	for c := range s.conns {
		c.closeIdle()
		// An answer that a client does not read holds its connection
		// only a moment longer: Shutdown does not wait WriteTimeout.
		c.uc.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
	}
	s.mu.Unlock()
	// Outside s.mu, which a call being served may wait for: Close waits
	// for its Serve to end. Callers' pending calls then fail (ENOSYS).
	// A caller can hold its listener in a call for as long as it likes
	// (a read of memory whose page fault it answers itself, through
	// userfaultfd or FUSE, never returns), so they close side by side,
	// and Shutdown waits for them no longer than ctx allows: one still
	// stuck ends when its caller lets it, or with the process.
	waitOrDone(ctx, func() {
		var wg sync.WaitGroup
		for _, l := range listeners {
			wg.Go(func() { l.Close() })
		}
		wg.Wait()
	})
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.uc.Close()
		}
		if !s.aborted {
			s.aborted = true
			close(s.abort) // request-key helpers still running are killed
		}
		s.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	s.mu.Lock()
	procs := s.procs.takeAll()
	for _, p := range procs {
		s.dropProcLocked(p)
	}
	s.tokens.clearSessions()
	tombs := s.procs.takeTombs()
	s.mu.Unlock()
	for _, p := range procs {
		p.end() // closing its pidfd also ends its awaitExit
	}
	for _, t := range tombs {
		t.p.caller.Release()
	}
	// The watchers include each listener's; a stuck one is not waited
	// for past ctx (see above).
	if !waitOrDone(ctx, s.watchers.Wait) && err == nil {
		err = ctx.Err()
	}
	return err
}

// waitOrDone runs wait and returns true once it has returned, or false
// as soon as ctx ends; wait then goes on in a goroutine of its own, to
// return when what it waits for ends.
func waitOrDone(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// shutdownWriteGrace is how long Shutdown lets an answer in flight take
// to leave.
const shutdownWriteGrace = time.Second
