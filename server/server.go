package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ukeys/ukeys/keys"
)

// Config tunes a Server. The zero value is usable: every field has a
// default.
type Config struct {
	// Logger receives structured logs; never payloads.
	Logger *slog.Logger
	// ReadTimeout bounds how long a connection may stay silent between
	// requests (default 5 minutes) and how long a request may take to
	// arrive once begun.
	ReadTimeout time.Duration
	// MaxConnsPerUID bounds simultaneous connections of one uid (default
	// 256); more are refused.
	MaxConnsPerUID int
	// Metrics, if set, observes operation counts and latencies.
	Metrics Observer
	// ProcessPoll is how often the daemon checks whether client processes
	// that have closed all their connections still exist (default 1
	// second); their keyrings are released once they do not.
	ProcessPoll time.Duration
}

// Server serves a keys.Service to clients on Unix sockets.
type Server struct {
	svc *keys.Service
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	procs    map[int]*proc // by pid; see process.go
	perUID   map[uint32]int
	sessions map[string]sessionGrant // session tokens
	grants   map[sessionGrant]string // the token of each grant, reused
	helpers  map[string]*keys.Caller
	conns    map[*conn]struct{}
	lns      []net.Listener
	closing  bool
	watching bool // reapProcs runs
	wg       sync.WaitGroup
	watchers sync.WaitGroup
	stop     chan struct{} // closed by Shutdown
	abort    chan struct{} // closed when Shutdown's context ends: helpers are killed
	aborted  bool
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
	if cfg.MaxConnsPerUID <= 0 {
		cfg.MaxConnsPerUID = 256
	}
	if cfg.ProcessPoll <= 0 {
		cfg.ProcessPoll = time.Second
	}
	return &Server{
		svc:      svc,
		cfg:      cfg,
		log:      cfg.Logger,
		procs:    make(map[int]*proc),
		perUID:   make(map[uint32]int),
		sessions: make(map[string]sessionGrant),
		grants:   make(map[sessionGrant]string),
		helpers:  make(map[string]*keys.Caller),
		conns:    make(map[*conn]struct{}),
		stop:     make(chan struct{}),
		abort:    make(chan struct{}),
	}
}

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("server: closed")

// Serve accepts connections on ln until Shutdown. It returns ErrClosed
// after a shutdown, or the listener's error.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.accept(c)
	}
}

func (s *Server) accept(uc *net.UnixConn) {
	cred, err := peerCred(uc)
	if err != nil {
		s.log.Warn("ukeyd: cannot learn peer credentials; closing", "err", err)
		uc.Close()
		return
	}
	s.mu.Lock()
	if s.closing || s.perUID[cred.UID] >= s.cfg.MaxConnsPerUID {
		refused := !s.closing
		s.mu.Unlock()
		if refused {
			s.log.Warn("ukeyd: too many connections for uid; refusing", "uid", cred.UID, "limit", s.cfg.MaxConnsPerUID)
			s.cfg.Metrics.Refused()
		}
		uc.Close()
		return
	}
	s.perUID[cred.UID]++
	var ended *proc
	p := s.procs[cred.PID]
	if p != nil && (p.caller.Cred().UID != cred.UID || p.handle.exited()) {
		// The pid belonged to a process that is gone: its keyrings go now
		// (or with its last connection), and this is a new process.
		delete(s.procs, cred.PID)
		if p.conns == 0 {
			ended = p
		}
		p = nil
	}
	if p == nil {
		p = &proc{caller: s.svc.NewCaller(cred), handle: openProc(uc, cred.PID)}
		s.procs[cred.PID] = p
	}
	p.conns++
	c := &conn{s: s, uc: uc, cred: cred, proc: p, caller: p.caller}
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
	s.mu.Lock()
	delete(s.conns, c)
	s.perUID[c.cred.UID]--
	if s.perUID[c.cred.UID] <= 0 {
		delete(s.perUID, c.cred.UID)
	}
	c.proc.conns--
	var ended *proc
	if c.proc.conns == 0 {
		switch {
		case s.procs[c.cred.PID] != c.proc:
			ended = c.proc // displaced by a new process with its pid
		case s.closing || c.proc.handle.leaving():
			delete(s.procs, c.cred.PID)
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
	for c := range s.conns {
		c.closeIdle()
	}
	s.mu.Unlock()
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
	procs := s.procs
	s.procs = make(map[int]*proc)
	clear(s.sessions)
	clear(s.grants)
	s.mu.Unlock()
	for _, p := range procs {
		p.end() // closing its pidfd also ends its awaitExit
	}
	s.watchers.Wait()
	return err
}

func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("server: no randomness for session tokens: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// sessionGrant is what a session token grants, and to which uid.
type sessionGrant struct {
	key *keys.Key
	uid uint32
}

// sessionToken returns a token that grants possession of the caller's
// session keyring to processes of uid (and root) that present it: another
// uid that learns the token gains nothing from it.
func (s *Server) sessionToken(k *keys.Key, uid uint32) string {
	g := sessionGrant{key: k, uid: uid}
	s.mu.Lock()
	defer s.mu.Unlock()
	// One token per session and uid: a client asking again and again
	// would otherwise grow the table for as long as the session lives.
	if t, ok := s.grants[g]; ok {
		return t
	}
	t := newToken()
	s.sessions[t] = g
	s.grants[g] = t
	return t
}
