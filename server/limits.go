package server

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/nice"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
)

// Every resource a caller can make the daemon hold has a bound per uid
// and a bound in total: descriptors (connections, and the pidfd of each
// client process the daemon tracks), memory (request and answer buffers
// beyond a small allowance per connection) and CPU (operations that cost
// far more than the rest, such as dh_compute). A uid that reaches its
// bound is refused with EDQUOT, the errno of the kernel's per-user key
// quota; the total bounds (EMFILE for descriptors, ENOMEM for memory)
// keep the daemon alive when many uids push at once. The per-uid bounds
// are a fraction of the totals, so that one uid alone never reaches a
// total and so never costs anyone else.
//
// "A uid" is the uid a caller's use is charged to (chargeUID): the uid
// the kernel reports for it, unless it is in a user namespace below the
// daemon's, which belongs to whoever made it. Every user has 65,536
// subordinate uids (/etc/subuid) that the setuid newuidmap maps into a
// namespace of the user's, each a uid of its own to SO_PEERCRED: charged
// each as itself, a few dozen of them would hold every connection of the
// daemon. They are all charged to their user
// (TestSubordinateUIDsChargedToTheirUser); the keys package's quotas
// (keys and bytes per uid) stay the kernel's, by the uid as seen.

// fdReserve is how many descriptors the daemon keeps for itself: the
// listeners, its log, the metrics endpoint (its listener and at most
// MetricsConns connections, and one more while it is closed), a
// request-key helper's pipes, big_key files (those have their own bound
// in the keys package).
const fdReserve = 64

// MetricsConns bounds the metrics endpoint's connections open at once
// (ukeyd -metrics): its share of fdReserve. A scraper needs one.
const MetricsConns = 4

// smallFrame is the size of a connection's read buffer: requests up to
// this size cost no reservation. smallAnswer is the answer buffer a
// connection keeps without one.
const (
	smallFrame  = 4 << 10
	smallAnswer = sock.KeepMax
)

// Limits are the bounds a [Server] enforces. Zero fields take defaults
// derived from the process's descriptor limit (RLIMIT_NOFILE) and from
// GOMAXPROCS; see [DefaultLimits].
type Limits struct {
	// MaxConns bounds the connections open at once; MaxConnsPerUID those
	// of one uid.
	MaxConns, MaxConnsPerUID int
	// MaxProcs bounds the client processes the daemon keeps state for
	// (each holds a pidfd while it lives, with or without a connection);
	// MaxProcsPerUID those of one uid.
	MaxProcs, MaxProcsPerUID int
	// MaxBuffered bounds the bytes held in request and answer buffers
	// beyond each connection's small allowance; MaxBufferedPerUID those
	// of one uid.
	MaxBuffered, MaxBufferedPerUID int
	// MaxExpensive bounds how many expensive operations (dh_compute,
	// pkey_*, and the calls that parse an asymmetric key or check a
	// signature: caller.costly) run at once; MaxExpensivePerUID how many of
	// one uid. Callers beyond them wait: the cost is their time, not
	// others'.
	MaxExpensive, MaxExpensivePerUID int
	// BigKeyFiles is the share of the descriptor limit DefaultLimits
	// leaves for big_key payload files; ukeyd passes it to
	// keys.SetBigKeyFileLimit.
	BigKeyFiles int
}

// DefaultLimits returns the bounds for a daemon whose descriptor limit is
// nofile: a quarter of what is left after a reserve goes to big_key
// files, the rest is split between connections and tracked processes
// (each of which may hold a descriptor); a uid gets an eighth of each
// total (at most 256 connections and processes), so that eight uids are
// needed to fill the daemon. Memory: 256 MiB in total, 32 MiB per uid.
// Expensive operations: one per uid, and GOMAXPROCS-1 in all (at least
// one), so that a processor stays free for everything else.
func DefaultLimits(nofile int) Limits {
	budget := max(nofile-fdReserve, 16)
	big := budget / 4
	rest := budget - big
	l := Limits{
		MaxConns:           rest / 2,
		MaxProcs:           rest / 2,
		MaxBuffered:        256 << 20,
		MaxBufferedPerUID:  32 << 20,
		MaxExpensive:       max(runtime.GOMAXPROCS(0)-1, 1),
		MaxExpensivePerUID: 1,
		BigKeyFiles:        big,
	}
	l.MaxConnsPerUID = min(max(l.MaxConns/8, 2), 256)
	l.MaxProcsPerUID = min(max(l.MaxProcs/8, 2), 256)
	return l
}

// NoFile returns the process's descriptor limit (the soft RLIMIT_NOFILE,
// which the Go runtime raises to the hard limit at start-up), or 1024 if
// it cannot be read.
func NoFile() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		if err == nil {
			return 1 << 30
		}
		return 1024
	}
	return int(rl.Cur)
}

// WithDefaults returns l with its zero fields filled from [DefaultLimits]
// for the process's descriptor limit, as [New] fills them: the seccomp
// agent bounds each container's [Server] within them.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits(NoFile())
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.MaxConns, d.MaxConns)
	fill(&l.MaxConnsPerUID, min(d.MaxConnsPerUID, l.MaxConns))
	fill(&l.MaxProcs, d.MaxProcs)
	fill(&l.MaxProcsPerUID, min(d.MaxProcsPerUID, l.MaxProcs))
	fill(&l.MaxBuffered, d.MaxBuffered)
	fill(&l.MaxBufferedPerUID, min(d.MaxBufferedPerUID, l.MaxBuffered))
	fill(&l.MaxExpensive, d.MaxExpensive)
	fill(&l.MaxExpensivePerUID, min(d.MaxExpensivePerUID, l.MaxExpensive))
	fill(&l.BigKeyFiles, d.BigKeyFiles)
	return l
}

// ownerUnknown is the account of callers whose user namespace cannot be
// learnt because their process has gone (one that connected, passed its
// descriptor on and exited): all of them share one uid's bounds, so that
// hiding the namespace that way gains no bounds of one's own. No uid is
// (uid_t)-1.
const ownerUnknown = ^uint32(0)

// chargeUID returns the uid that what cred's process makes the daemon
// hold is charged to: the owner of its user namespace, walked up to the
// daemon's own ([process.NSOwner]), which is cred.UID for a process in the
// daemon's namespace. h is the process's handle, pinned before the
// namespace is read: a pid that names another process by the time it is
// read (its own gone) is charged to ownerUnknown, never to whoever has
// the pid now. A caller whose pid the daemon cannot see (another pid
// namespace) is charged as its uid. This is the one place that decides
// whom a caller's use is charged to.
func chargeUID(cred keys.Cred, h *process.Handle) uint32 {
	if cred.PID <= 0 {
		return cred.UID
	}
	owner, ok, gone := process.NSOwner(cred.PID, cred.UID)
	switch {
	case gone || h.Exited():
		return ownerUnknown
	case !ok:
		// Alive, and its namespace not readable (a daemon of one user
		// and a process made undumpable): the uid it has.
		return cred.UID
	}
	return owner
}

// chargeOfUIDLocked returns the account of a uid known only by number (a
// request-key upcall's requestor): that of a process of that uid the
// daemon keeps, else the uid itself. s.mu is held.
func (s *Server) chargeOfUIDLocked(uid uint32) uint32 {
	for _, p := range s.procs.byPID {
		if p.tracked && p.caller.Cred().UID == uid {
			return p.charge
		}
	}
	return uid
}

// usageTable is what callers hold of the server, by the uid each is
// charged to and in total, against its bounds. Its methods are called
// with s.mu held, but for heavy, a channel, and pool, which has a lock of
// its own.
type usageTable struct {
	lim       Limits
	byUID     map[uint32]*usage
	nconns    int // connections open
	nprocs    int // processes tracked, in the process table or not (pid 0)
	nbuffered int // bytes reserved for buffers
	// heavy has a slot per expensive operation running: the server's,
	// or the host daemon's, shared by the seccomp agent's servers.
	heavy chan struct{}
	// pool, if set, is what the server's tracked processes and
	// listeners count against besides its own bound: the seccomp
	// agent's bound for every container's namespace together.
	pool *Pool
}

func newUsageTable(lim Limits, pool *Pool, shared *Slots) usageTable {
	heavy := make(chan struct{}, lim.MaxExpensive)
	if shared != nil {
		heavy = shared.c
	}
	return usageTable{lim: lim, byUID: make(map[uint32]*usage), heavy: heavy, pool: pool}
}

// usage is what one uid holds of the server. s.mu guards it.
type usage struct {
	conns, procs int // procs counts seccomp listeners too (intercept.go)
	upcalls      int // request-key helpers running for this uid's requests
	buffered     int
	expensive    chan struct{} // a slot per expensive operation running
	spin         *spinAccount  // its connections' budget of polling (spin.go)
	cpu          cpuAccount    // what its expensive operations used (cpu.go)
}

// of returns uid's usage, creating it.
func (t *usageTable) of(uid uint32) *usage {
	u := t.byUID[uid]
	if u == nil {
		u = &usage{expensive: make(chan struct{}, t.lim.MaxExpensivePerUID)}
		t.byUID[uid] = u
	}
	return u
}

// forget drops uid's usage once it holds nothing. An expensive operation
// runs only for a caller counted here (a connection, or an intercepted
// process kept), so with neither nothing holds a slot of its channel.
func (t *usageTable) forget(uid uint32) {
	if u := t.byUID[uid]; u != nil && u.conns == 0 && u.procs == 0 && u.upcalls == 0 && u.buffered == 0 && !u.cpu.owes(time.Now()) {
		delete(t.byUID, uid)
	}
}

// admit counts one more of something of which uid holds *mine and the
// server *all, or says which bound it would pass: EDQUOT for the uid's,
// EMFILE for the server's (both are counts of descriptors).
func admit(mine, all *int, perUID, total int) keys.Errno {
	if e := bound(*mine, *all, perUID, total); e != 0 {
		return e
	}
	*mine++
	*all++
	return 0
}

// bound says which bound one more of something would pass, of which uid
// holds mine and the server all: EDQUOT for the uid's, EMFILE for the
// server's.
func bound(mine, all, perUID, total int) keys.Errno {
	switch {
	case mine >= perUID:
		return keys.EDQUOT
	case all >= total:
		return keys.EMFILE
	}
	return 0
}

// maxUpcallsPerUID is how many request-key helpers may run at once for
// one requesting uid: a thirty-second of a uid's bound on processes. A
// helper runs as the daemon's user (root), and it and what it starts
// (ukeyctl run, its listener, the programs it runs) are counted as
// root's processes and connections: without a bound per requester, a
// few users asking for keys whose handlers are slow (a DNS or CIFS
// lookup) would fill root's share, and root's own processes would be
// refused (TestUpcallsBoundedPerRequester).
func (t *usageTable) maxUpcallsPerUID() int { return max(1, t.lim.MaxProcsPerUID/32) }

// admitUpcall counts a helper starting for a request of uid's, charged
// to uid's account, which it returns, or reports that the account has as
// many running as it may (EDQUOT).
func (s *Server) admitUpcall(uid uint32) (uint32, keys.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid = s.chargeOfUIDLocked(uid)
	u := s.usage.of(uid)
	if u.upcalls >= s.usage.maxUpcallsPerUID() {
		s.usage.forget(uid)
		return uid, keys.EDQUOT
	}
	u.upcalls++
	return uid, 0
}

// dropUpcall undoes admitUpcall, given the account it returned.
func (s *Server) dropUpcall(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.usage.byUID[uid]; u != nil {
		u.upcalls--
		s.usage.forget(uid)
	}
}

// refusal says why a connection of uid would be refused, before
// anything is done for it (newProc: it would count a process the daemon
// does not keep yet), or 0. accept asks it before it reads a new
// process's ancestry in /proc, which takes up to 64 reads in the accept
// loop: a uid at its bounds must not have every connection it makes
// cost other uids that wait to be accepted.
func (t *usageTable) refusal(uid uint32, newProc bool) (keys.Errno, string) {
	var conns, procs int
	if u := t.byUID[uid]; u != nil {
		conns, procs = u.conns, u.procs
	}
	if e := bound(conns, t.nconns, t.lim.MaxConnsPerUID, t.lim.MaxConns); e != 0 {
		return e, "too many connections"
	}
	if newProc {
		if e := bound(procs, t.nprocs, t.lim.MaxProcsPerUID, t.lim.MaxProcs); e != 0 {
			return e, "too many client processes"
		}
	}
	return 0, ""
}

// admitConn counts a new connection of uid, or says why it cannot be
// served.
func (t *usageTable) admitConn(uid uint32) keys.Errno {
	u := t.of(uid)
	return admit(&u.conns, &t.nconns, t.lim.MaxConnsPerUID, t.lim.MaxConns)
}

// dropConn undoes admitConn.
func (t *usageTable) dropConn(uid uint32) {
	t.byUID[uid].conns--
	t.nconns--
	t.forget(uid)
}

// admitProc counts a new tracked process of uid.
func (t *usageTable) admitProc(uid uint32) keys.Errno {
	u := t.of(uid)
	if e := admit(&u.procs, &t.nprocs, t.lim.MaxProcsPerUID, t.lim.MaxProcs); e != 0 {
		return e
	}
	if !t.pool.take() {
		// The Servers sharing the pool (every container's namespace of
		// the seccomp agent) are at its bound together: EMFILE, as for
		// the server's own.
		u.procs--
		t.nprocs--
		return keys.EMFILE
	}
	return 0
}

// dropProc undoes admitProc.
func (t *usageTable) dropProc(uid uint32) {
	if u := t.byUID[uid]; u != nil {
		u.procs--
		t.nprocs--
		t.pool.give()
		t.forget(uid)
	}
}

// restoreProc and restoreConn count a process and a connection handed
// over (takeover.go), which the old daemon had admitted: past the
// bounds, if this daemon's are lower, and in the pool past its bound
// too (a seccomp agent's namespaces, thawed: their processes are given
// back to the pool as they go, dropProc).
func (t *usageTable) restoreProc(uid uint32) {
	t.of(uid).procs++
	t.nprocs++
	t.pool.takeAnyway()
}

func (t *usageTable) restoreConn(uid uint32) {
	t.of(uid).conns++
	t.nconns++
}

// reserve charges n buffered bytes to uid, or says why it cannot.
func (s *Server) reserve(uid uint32, n int) keys.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage.reserve(uid, n)
}

func (t *usageTable) reserve(uid uint32, n int) keys.Errno {
	u := t.of(uid)
	switch {
	case u.buffered+n > t.lim.MaxBufferedPerUID:
		t.forget(uid)
		return keys.EDQUOT
	case t.nbuffered+n > t.lim.MaxBuffered:
		t.forget(uid)
		return keys.ENOMEM
	}
	u.buffered += n
	t.nbuffered += n
	return 0
}

// unreserve returns n buffered bytes of uid.
func (s *Server) unreserve(uid uint32, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage.byUID[uid].buffered -= n
	s.usage.nbuffered -= n
	s.usage.forget(uid)
}

// expensive runs f once uid has a free slot for an expensive operation
// and the server has one: a uid that asks for many at once waits for its
// own, and the rest of the machine keeps a processor. It gives up with
// EINTR if the daemon shuts down meanwhile.
func (s *Server) expensive(uid uint32, f func()) error {
	s.mu.Lock()
	u := s.usage.of(uid)
	mine, acct := u.expensive, &u.cpu
	hook := s.expensiveHook
	s.mu.Unlock()
	select {
	case mine <- struct{}{}:
	case <-s.stop:
		return keys.EINTR
	}
	defer func() { <-mine }()
	if d := acct.wait(time.Now()); d > 0 {
		// What it used beyond its share: its own wait, on its own slot.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
			return keys.EINTR
		}
	}
	heavy := s.usage.heavy
	select {
	case heavy <- struct{}{}:
	case <-s.stop:
		return keys.EINTR
	}
	defer func() { <-heavy }()
	if hook != nil {
		hook(uid, true)
		defer hook(uid, false)
	}
	start := time.Now()
	nice.Run(f)
	end := time.Now()
	acct.charge(end, end.Sub(start))
	return nil
}

// Stats is a snapshot of what callers hold of a [Server], against its
// [Limits].
type Stats struct {
	Conns int // connections open
	Procs int // client processes whose keyrings the server keeps, with listeners and the threads waiting in them (what MaxProcs bounds)
	// Processes are the processes in the process table: those that have
	// called, and those met as their ancestors or children.
	Processes        int
	BufferedBytes    int // bytes reserved for large requests and answers
	ExpensiveRunning int // expensive operations (dh_compute) running
	// FollowsForks: the daemon sees processes fork (forks.go), so that a
	// background job whose parent has exited keeps its session. Not in a
	// pid or user namespace of the daemon's own, nor without
	// CAP_NET_ADMIN.
	FollowsForks bool
	Limits       Limits
}

// Stats returns what callers hold of the server now.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A slot of heavy is held exactly while an expensive operation runs.
	return Stats{Conns: len(s.conns), Procs: s.usage.nprocs, Processes: len(s.procs.byPID), BufferedBytes: s.usage.nbuffered,
		ExpensiveRunning: len(s.usage.heavy), FollowsForks: s.procs.forks.able, Limits: s.usage.lim}
}
