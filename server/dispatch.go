package server

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// watchWait bounds one OpWatchNext.
var watchWait = 2 * time.Second

// watchQueueSize is how many notifications a connection's queue holds.
const watchQueueSize = 256

func errnoOf(err error) uint16 {
	e, _ := keys.ErrnoOf(err)
	return uint16(e)
}

func fail(err error) *wire.Response { return &wire.Response{Errno: errnoOf(err)} }

func ok(ints ...int64) *wire.Response { return &wire.Response{Ints: ints} }

func okBuf(b []byte, ints ...int64) *wire.Response {
	if b == nil {
		b = []byte{}
	}
	return &wire.Response{Ints: ints, Bufs: [][]byte{b}}
}

func result(id keys.Serial, err error) *wire.Response {
	if err != nil {
		return fail(err)
	}
	return ok(int64(id))
}

func done(err error) *wire.Response {
	if err != nil {
		return fail(err)
	}
	return ok()
}

// dispatch runs one request as the caller. Every decision about
// permissions is the keys package's, made against the caller's
// credentials: those the kernel reported for the socket, or, for an
// intercepted call, those its thread has at the call.
// The request's arguments are read as its operation's entry in wire's
// table says, once Check has held them to it.
func (c *caller) dispatch(r *wire.Request) *wire.Response {
	spec := wire.SpecOf(r.Op)
	if spec == nil {
		return fail(keys.EOPNOTSUPP)
	}
	a, err := spec.Check(r)
	if err != nil {
		return fail(err)
	}
	// A request-key helper acts for its requestor only within the
	// authority it was given, and only while it lasts.
	if h := c.helper; h != nil {
		return c.dispatchHelper(h, a)
	}
	return c.run(a)
}

// run serves a checked request: an expensive one (costly) within the
// bound of expensive operations, as dh_compute and pkey_* are.
func (c *caller) run(a wire.Args) *wire.Response {
	if c.costly(a) {
		var resp *wire.Response
		if err := c.s.expensive(c.account(), func() { resp = c.runOp(a) }); err != nil {
			return fail(err)
		}
		return resp
	}
	return c.runOp(a)
}

// costly reports whether serving a checked request parses an asymmetric
// key's payload (a certificate whose self-signature is checked: ~3.5 ms
// of CPU for P-521) or checks the signature of a key linked into a
// restricted keyring (keys/cost.go): an add_key of the asymmetric type,
// an instantiate or update of an asymmetric key, a link or move into a
// keyring restricted by a check. Refused or not, such a call costs the
// daemon that CPU, and quota is charged only on success, so without a
// bound one uid could keep every processor of the daemon busy
// (TestCostlyAddKeyBounded).
func (c *caller) costly(a wire.Args) bool {
	cl := c.kc
	switch a.Op() {
	case wire.OpAddKey:
		return c.s.svc.CostlyType(a.Str(0))
	case wire.OpInstantiate:
		return cl.CostlyKey(a.Serial(0)) || cl.CostlyRing(a.Serial(2))
	case wire.OpUpdate:
		return cl.CostlyKey(a.Serial(0))
	case wire.OpLink:
		return cl.CostlyRing(a.Serial(1))
	case wire.OpMove:
		return cl.CostlyRing(a.Serial(2))
	}
	return false
}

// runOp serves a checked request.
func (c *caller) runOp(a wire.Args) *wire.Response {
	cl := c.kc
	if c.helper == nil && usesSession(a.Op()) {
		// A process that presented no token (a client presents it
		// first, if at all) and inherited no session joins its login's
		// (login.go).
		c.s.settleSession(c.proc)
	}
	switch a.Op() {
	case wire.OpGetKeyringID:
		return result(cl.GetKeyringID(a.Serial(0), a.Int(1) != 0))
	case wire.OpJoinSession:
		id, err := cl.JoinSessionKeyring(a.OptStr(0))
		if err == nil {
			c.proc.inherited.Store(false) // its own choice now, as a token would be
		}
		return result(id, err)
	case wire.OpUpdate:
		return done(cl.Update(a.Serial(0), a.Bytes(1)))
	case wire.OpRevoke:
		return done(cl.Revoke(a.Serial(0)))
	case wire.OpChown:
		return done(cl.Chown(a.Serial(0), a.Int(1), a.Int(2)))
	case wire.OpSetPerm:
		return done(cl.SetPerm(a.Serial(0), keys.Perm(uint32(a.Int(1)))))
	case wire.OpDescribe:
		d, err := cl.Describe(a.Serial(0))
		if err != nil {
			return fail(err)
		}
		return okBuf([]byte(d.String()))
	case wire.OpClear:
		return done(cl.Clear(a.Serial(0)))
	case wire.OpLink:
		return done(cl.Link(a.Serial(0), a.Serial(1)))
	case wire.OpUnlink:
		return done(cl.Unlink(a.Serial(0), a.Serial(1)))
	case wire.OpSearch:
		return result(cl.Search(a.Serial(0), a.Str(1), a.Str(2), a.Serial(3)))
	case wire.OpRead:
		b, err := c.read(cl, a.Serial(0))
		if err != nil {
			return fail(err)
		}
		return okBuf(b)
	case wire.OpInstantiate:
		return done(cl.Instantiate(a.Serial(0), a.Bytes(1), a.Serial(2)))
	case wire.OpNegate:
		return done(cl.Negate(a.Serial(0), uint32(a.Int(1)), a.Serial(2)))
	case wire.OpSetReqKeyKeyring:
		prev, err := cl.SetReqKeyKeyring(int(a.Int(0)))
		if err != nil {
			return fail(err)
		}
		return ok(int64(prev))
	case wire.OpSetTimeout:
		return done(cl.SetTimeout(a.Serial(0), uint32(a.Int(1))))
	case wire.OpAssumeAuthority:
		return result(cl.AssumeAuthority(a.Serial(0)))
	case wire.OpGetSecurity:
		label, err := cl.GetSecurity(a.Serial(0))
		if err != nil {
			return fail(err)
		}
		return okBuf([]byte(label))
	case wire.OpSessionToParent:
		return done(c.sessionToParent())
	case wire.OpReject:
		return done(cl.Reject(a.Serial(0), uint32(a.Int(1)), keys.Errno(a.Int(2)), a.Serial(3)))
	case wire.OpInvalidate:
		return done(cl.Invalidate(a.Serial(0)))
	case wire.OpGetPersistent:
		return result(cl.GetPersistent(a.Int(0), a.Serial(1)))
	case wire.OpDHCompute:
		return c.dhCompute(a)
	case wire.OpPkeyQuery:
		return c.pkeyQuery(a)
	case wire.OpPkeyEncrypt, wire.OpPkeyDecrypt, wire.OpPkeySign:
		return c.pkeyEDS(a)
	case wire.OpPkeyVerify:
		return c.pkeyVerify(a)
	case wire.OpRestrictKeyring:
		return done(cl.RestrictKeyring(a.Serial(0), a.OptStr(1), a.OptStr(2)))
	case wire.OpMove:
		return done(cl.Move(a.Serial(0), a.Serial(1), a.Serial(2), uint32(a.Int(3))))
	case wire.OpCapabilities:
		return okBuf(cl.Capabilities())
	case wire.OpWatchKey:
		if c.intercepted {
			// Into the notification pipe the call named, if the daemon
			// made it: the kernel's EINVAL for any other descriptor.
			return done(cl.WatchKey(a.Serial(0), c.s.pipeQueue(c.pipe, c.account()), int(a.Int(1))))
		}
		// Made by the serving goroutine alone, which is this one: the
		// connection's other goroutines only close it.
		q := c.watch.Load()
		if q == nil {
			q = keys.NewWatchQueue(watchQueueSize)
			c.watch.Store(q)
		}
		return done(cl.WatchKey(a.Serial(0), q, int(a.Int(1))))
	case wire.OpWatchNext:
		q := c.watch.Load()
		if q == nil {
			return fail(keys.ENOENT)
		}
		// Bounded, so that a client that goes away while waiting does not
		// pin its connection: it asks again on EAGAIN.
		n, okN := q.NextTimeout(watchWait)
		if !okN {
			return fail(keys.EAGAIN)
		}
		return ok(int64(n.Key), int64(n.Kind), int64(n.Aux), int64(n.WatchID))
	case wire.OpAddKey:
		return result(cl.AddKey(a.Str(0), a.Str(1), a.Bytes(2), a.Serial(3)))
	case wire.OpRequestKey:
		return result(cl.RequestKey(a.Str(0), a.Str(1), a.Bytes(2), a.Serial(3)))
	case wire.OpAddKeyCheck:
		n := a.Int(2)
		if n < 0 || n > math.MaxInt32 {
			return fail(keys.EINVAL)
		}
		return done(cl.AddKeyCheck(a.Str(0), a.Str(1), int(n), a.Serial(3)))
	case wire.OpProcKeys:
		return okBuf([]byte(cl.ProcKeys()))
	case wire.OpProcKeyUsers:
		return okBuf([]byte(c.s.svc.ProcKeyUsers()))
	case wire.OpSysctlGet:
		return okBuf([]byte(sysctlText(c.s.svc.Tunables())))
	case wire.OpSysctlSet:
		if c.cred.UID != 0 {
			return fail(keys.EACCES)
		}
		return done(setSysctl(c.s.svc, a.Str(0), a.Str(1)))
	case wire.OpStatus:
		return okBuf([]byte(c.s.status(c.daemonsEqual())))
	case wire.OpSessionAttach:
		return result(c.attach(a.Str(0)))
	case wire.OpIntercept:
		return done(c.intercept())
	case wire.OpTakeover:
		// Only on a daemon's socket, where the connection's loop serves it
		// (handover.go): not in process, not from an intercepted call.
		return fail(keys.EOPNOTSUPP)
	case wire.OpSessionToken:
		k := cl.Session()
		if k == nil {
			return fail(keys.ENOKEY)
		}
		return okBuf([]byte(c.s.sessionToken(k, c.cred.UID)), int64(k.Serial()))
	}
	// In wire's table but not served here: a bug, which
	// TestEveryOperationIsServed catches by this errno.
	return fail(keys.ENOSYS)
}

// attach lets a process present a token: a session token makes it
// possess that session keyring; a helper token makes the connection act
// for the request-key helper it was given to, if the process is that
// helper or one of its descendants (attachHelper).
func (c *caller) attach(token string) (keys.Serial, error) {
	c.s.mu.Lock()
	grant, isSession, helper := c.s.tokens.lookup(token)
	c.s.mu.Unlock()
	if helper != nil {
		return c.attachHelper(helper)
	}
	if c.proc.inherited.Load() {
		// The process's session came from its ancestry, as the kernel's
		// comes with the credentials a child inherits: a token in its
		// environment (stale after a session_to_parent, say) does not
		// replace it.
		if k := c.kc.Session(); k != nil {
			return k.Serial(), nil
		}
	}
	// A token replayed by another uid is refused; root may join, as a
	// process keeps its session keyring across su in the kernel.
	k := grant.key
	if isSession && grant.uid != c.cred.UID && c.cred.UID != 0 {
		k = nil
	}
	if k != nil && c.kc.SetSession(k) == nil {
		return k.Serial(), nil
	}
	// A session token that names no live session (the daemon restarted,
	// or every process of the session is gone), or another uid's: the
	// process's session is lost, and says so (EKEYREVOKED on @s) rather
	// than quietly becoming a fresh one that nobody else shares.
	if err := c.kc.RevokeSession(); err != nil {
		return 0, err
	}
	return 0, keys.EACCES
}

// sessionToParent gives the caller's session keyring to its parent
// process (KEYCTL_SESSION_TO_PARENT), on the kernel's conditions: the
// parent has the caller's uid and gid as its real, effective and saved
// ids, is single-threaded and is not init, and the session keyring
// belongs to the caller. The parent need not be a client: the daemon
// then starts to keep it (as a process it follows by pidfd until it
// exits) with the new session, which its children, the shell's next
// commands, inherit from it (ancestry.go).
func (c *caller) sessionToParent() error {
	k := c.kc.Session()
	if k == nil {
		return keys.ENOKEY
	}
	if d, err := c.kc.Describe(keys.SessionKeyring); err != nil || d.UID != int64(c.cred.UID) {
		return keys.EPERM
	}
	ppid, _, ok := process.Stat(c.cred.PID)
	if !ok || ppid <= 1 {
		return keys.EPERM
	}
	_, pstart, ok := process.Stat(ppid)
	if !ok {
		return keys.EPERM
	}
	pc, ok := procfs.ReadStatus(ppid)
	for _, id := range pc.UIDs[:3] { // real, effective, saved
		ok = ok && id == c.cred.UID
	}
	for _, id := range pc.GIDs[:3] {
		ok = ok && id == c.cred.GID
	}
	if !ok || pc.Threads != 1 {
		return keys.EPERM
	}
	parent, err := c.s.knownProc(ppid, pstart, c.cred)
	if err != nil {
		return err
	}
	return parent.caller.SetSession(k)
}

func sysctlText(t keys.Tunables) string {
	var b strings.Builder
	for _, n := range keys.SysctlNames {
		v, _ := t.Sysctl(n)
		fmt.Fprintf(&b, "%s = %d\n", n, v)
	}
	return b.String()
}

func setSysctl(svc *keys.Service, name, value string) error {
	v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return keys.EINVAL
	}
	t, err := svc.Tunables().WithSysctl(name, v)
	if err != nil {
		return err
	}
	return svc.SetTunables(t)
}

// status reports the daemon's state in "name: value" lines, and, if
// namespaces (the caller is the daemon's equal: [caller.daemonsEqual]),
// the seccomp agent's key namespaces ([Config.Namespaces],
// [wire.AppendNamespaces]).
func (s *Server) status(namespaces bool) string {
	ss := s.Stats()
	st := s.svc.Domain().Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "scope: %s\n", endpoint.Scope(os.Geteuid()))
	fmt.Fprintf(&b, "pid: %d\n", os.Getpid())
	fmt.Fprintf(&b, "keys: %d\n", s.svc.Keys())
	fmt.Fprintf(&b, "connections: %d\nprocesses: %d\n", ss.Conns, ss.Procs)
	fmt.Fprintf(&b, "buffered_bytes: %d\nexpensive_running: %d\nbig_key_files: %d\n", ss.BufferedBytes, ss.ExpensiveRunning, keys.BigKeyFiles())
	fmt.Fprintf(&b, "follows_forks: %t\n", ss.FollowsForks)
	fmt.Fprintf(&b, "procs: %d\n", runtime.GOMAXPROCS(0))
	if n := debug.SetMemoryLimit(-1); n == math.MaxInt64 {
		b.WriteString("memory_limit: off\n")
	} else {
		fmt.Fprintf(&b, "memory_limit: %d\n", n)
	}
	writeMemoryLocked(&b)
	fmt.Fprintf(&b, "rcu_grace_periods: %d\n", st.GracePeriods)
	fmt.Fprintf(&b, "rcu_grace_period_p50: %v\nrcu_grace_period_p99: %v\nrcu_grace_period_max: %v\n",
		st.GracePeriodLatency.P50, st.GracePeriodLatency.P99, st.GracePeriodLatency.Max)
	fmt.Fprintf(&b, "rcu_callbacks_queued: %d\nrcu_callbacks_invoked: %d\nrcu_callback_backlog: %d\n",
		st.CallbacksQueued, st.CallbacksInvoked, st.CallbackBacklog)
	fmt.Fprintf(&b, "rcu_stalls: %d\n", st.Stalls)
	if s.cfg.Namespaces != nil && namespaces {
		b.Write(wire.AppendNamespaces(nil, s.cfg.Namespaces()))
	}
	return b.String()
}
