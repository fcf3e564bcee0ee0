package server

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// watchWait bounds one OpWatchNext.
var watchWait = 2 * time.Second

func errnoOf(err error) uint16 {
	e, _ := keys.ErrnoOf(err)
	return uint16(e)
}

// typeDescFit reports whether a request's type name and description
// (buffers 0 and 1) are within the kernel's limits. Longer ones fail with
// EINVAL, as the kernel's copies from user space do, before they are
// copied into strings here: a description may be as long as a frame.
//
// Like the kernel's copies (strncpy_from_user, strndup_user), a string
// ends at its first NUL byte: "name\x00rest" is the description "name".
// It cuts the request's strings in place.
func typeDescFit(r *wire.Request) bool {
	cutStrings(r, 0, 1)
	return len(r.Buf(0)) <= keys.MaxTypeName+1 && len(r.Buf(1)) <= keys.MaxDescription
}

// cutStrings ends each of the request's buffers at index in idx at its
// first NUL byte, as the kernel reads a C string from user space. An
// absent buffer stays absent.
func cutStrings(r *wire.Request, idx ...int) {
	for _, i := range idx {
		if i < len(r.Bufs) && r.Bufs[i] != nil {
			if n := bytes.IndexByte(r.Bufs[i], 0); n >= 0 {
				r.Bufs[i] = r.Bufs[i][:n:n]
			}
		}
	}
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

func optString(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// dispatch runs one request as the connection's caller. Every decision
// about permissions is the keys package's, made against the credentials
// the kernel reported for the socket.
func (c *conn) dispatch(r *wire.Request) *wire.Response {
	// A request-key helper's connection acts for its requestor only
	// within the authority it was given, and only while it lasts.
	if h := c.helper; h != nil && !h.admitted {
		return c.dispatchHelper(r)
	}
	cl := c.caller
	id := keys.Serial(r.Int(0))
	switch r.Op {
	case wire.OpGetKeyringID:
		return result(cl.GetKeyringID(id, r.Int(1) != 0))
	case wire.OpJoinSession:
		cutStrings(r, 0)
		return result(cl.JoinSessionKeyring(optString(r.Buf(0))))
	case wire.OpUpdate:
		return done(cl.Update(id, r.Buf(0)))
	case wire.OpRevoke:
		return done(cl.Revoke(id))
	case wire.OpChown:
		return done(cl.Chown(id, r.Int(1), r.Int(2)))
	case wire.OpSetPerm:
		return done(cl.SetPerm(id, keys.Perm(uint32(r.Int(1)))))
	case wire.OpDescribe:
		d, err := cl.Describe(id)
		if err != nil {
			return fail(err)
		}
		return okBuf([]byte(d.String()))
	case wire.OpClear:
		return done(cl.Clear(id))
	case wire.OpLink:
		return done(cl.Link(id, keys.Serial(r.Int(1))))
	case wire.OpUnlink:
		return done(cl.Unlink(id, keys.Serial(r.Int(1))))
	case wire.OpSearch:
		if !typeDescFit(r) {
			return fail(keys.EINVAL)
		}
		return result(cl.Search(id, string(r.Buf(0)), string(r.Buf(1)), keys.Serial(r.Int(1))))
	case wire.OpRead:
		b, err := c.read(cl, id)
		if err != nil {
			return fail(err)
		}
		return okBuf(b)
	case wire.OpInstantiate:
		return done(cl.Instantiate(id, r.Buf(0), keys.Serial(r.Int(1))))
	case wire.OpNegate:
		return done(cl.Negate(id, uint32(r.Int(1)), keys.Serial(r.Int(2))))
	case wire.OpSetReqKeyKeyring:
		prev, err := cl.SetReqKeyKeyring(int(r.Int(0)))
		if err != nil {
			return fail(err)
		}
		return ok(int64(prev))
	case wire.OpSetTimeout:
		return done(cl.SetTimeout(id, uint32(r.Int(1))))
	case wire.OpAssumeAuthority:
		return result(cl.AssumeAuthority(id))
	case wire.OpGetSecurity:
		label, err := cl.GetSecurity(id)
		if err != nil {
			return fail(err)
		}
		return okBuf([]byte(label))
	case wire.OpSessionToParent:
		return done(c.sessionToParent())
	case wire.OpReject:
		return done(cl.Reject(id, uint32(r.Int(1)), keys.Errno(r.Int(2)), keys.Serial(r.Int(3))))
	case wire.OpInvalidate:
		return done(cl.Invalidate(id))
	case wire.OpGetPersistent:
		return result(cl.GetPersistent(r.Int(0), keys.Serial(r.Int(1))))
	case wire.OpDHCompute:
		return c.dhCompute(r)
	case wire.OpRestrictKeyring:
		cutStrings(r, 0, 1)
		return done(cl.RestrictKeyring(id, optString(r.Buf(0)), optString(r.Buf(1))))
	case wire.OpMove:
		return done(cl.Move(id, keys.Serial(r.Int(1)), keys.Serial(r.Int(2)), uint32(r.Int(3))))
	case wire.OpCapabilities:
		return okBuf(cl.Capabilities())
	case wire.OpWatchKey:
		c.mu.Lock() // closeIdle reads c.watch
		if c.watch == nil {
			c.watch = keys.NewWatchQueue(256)
		}
		q := c.watch
		c.mu.Unlock()
		return done(cl.WatchKey(id, q, int(r.Int(1))))
	case wire.OpWatchNext:
		c.mu.Lock()
		q := c.watch
		c.mu.Unlock()
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
		if !typeDescFit(r) {
			return fail(keys.EINVAL)
		}
		return result(cl.AddKey(string(r.Buf(0)), string(r.Buf(1)), r.Buf(2), id))
	case wire.OpRequestKey:
		if !typeDescFit(r) {
			return fail(keys.EINVAL)
		}
		cutStrings(r, 2) // the callout information is a string too
		return result(cl.RequestKey(string(r.Buf(0)), string(r.Buf(1)), r.Buf(2), id))
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
		cutStrings(r, 0, 1)
		return done(setSysctl(c.s.svc, string(r.Buf(0)), string(r.Buf(1))))
	case wire.OpStatus:
		return okBuf([]byte(c.s.status()))
	case wire.OpSessionAttach:
		return result(c.attach(string(r.Buf(0))))
	case wire.OpSessionToken:
		k := cl.Session()
		if k == nil {
			return fail(keys.ENOKEY)
		}
		return okBuf([]byte(c.s.sessionToken(k, c.cred.UID)), int64(k.Serial()))
	}
	return fail(keys.EOPNOTSUPP)
}

// read reads a key's payload into the connection's read buffer, which
// the server wipes once the answer is written: a key read then allocates
// no copy of the payload.
func (c *conn) read(cl *keys.Caller, id keys.Serial) ([]byte, error) {
	buf := c.rbuf[:cap(c.rbuf)]
	for {
		n, err := cl.ReadInto(id, buf)
		if err != nil {
			return nil, err
		}
		if n <= len(buf) {
			return buf[:n], nil
		}
		// Too small (or the payload grew meanwhile): a buffer that fits.
		buf = make([]byte, n)
		if n <= 4<<10 {
			c.rbuf = buf // small payloads are the common case: keep it
		}
	}
}

// attach lets a process present a token: a session token makes it
// possess that session keyring; a helper token makes the connection act
// for the request-key helper it was given to, if the process is that
// helper or one of its descendants (attachHelper).
func (c *conn) attach(token string) (keys.Serial, error) {
	c.s.mu.Lock()
	grant, isSession := c.s.sessions[token]
	helper := c.s.helpers[token]
	c.s.mu.Unlock()
	if helper != nil {
		return c.attachHelper(helper)
	}
	// A token replayed by another uid is refused; root may join, as a
	// process keeps its session keyring across su in the kernel.
	k := grant.key
	if isSession && grant.uid != c.cred.UID && c.cred.UID != 0 {
		k = nil
	}
	if k != nil && c.caller.SetSession(k) == nil {
		return k.Serial(), nil
	}
	// A session token that names no live session (the daemon restarted,
	// or every process of the session is gone), or another uid's: the
	// process's session is lost, and says so (EKEYREVOKED on @s) rather
	// than quietly becoming a fresh one that nobody else shares.
	if err := c.caller.RevokeSession(); err != nil {
		return 0, err
	}
	return 0, keys.EACCES
}

// sessionToParent gives the caller's session keyring to its parent
// process, if that process is a client of this daemon with the same uid.
func (c *conn) sessionToParent() error {
	ppid := parentPID(c.cred.PID)
	c.s.mu.Lock()
	parent := c.s.procs[ppid]
	c.s.mu.Unlock()
	if ppid <= 1 || parent == nil || parent.caller.Cred().UID != c.cred.UID {
		return keys.EPERM
	}
	k := c.caller.Session()
	if k == nil {
		return keys.ENOKEY
	}
	return parent.caller.SetSession(k)
}

func parentPID(pid int) int {
	st, _ := readStat(pid)
	return st.ppid
}

// Sysctl names, as under /proc/sys/kernel/keys.
var sysctlNames = []string{"gc_delay", "maxbytes", "maxkeys", "persistent_keyring_expiry", "root_maxbytes", "root_maxkeys"}

func sysctlText(t keys.Tunables) string {
	var b strings.Builder
	for _, n := range sysctlNames {
		v, _ := sysctlGet(t, n)
		fmt.Fprintf(&b, "%s = %d\n", n, v)
	}
	return b.String()
}

func sysctlGet(t keys.Tunables, name string) (int64, bool) {
	switch name {
	case "gc_delay":
		return int64(t.GCDelay / time.Second), true
	case "maxkeys":
		return int64(t.MaxKeys), true
	case "maxbytes":
		return int64(t.MaxBytes), true
	case "root_maxkeys":
		return int64(t.RootMaxKeys), true
	case "root_maxbytes":
		return int64(t.RootMaxBytes), true
	case "persistent_keyring_expiry":
		return int64(t.PersistentExpiry / time.Second), true
	}
	return 0, false
}

func setSysctl(svc *keys.Service, name, value string) error {
	v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return keys.EINVAL
	}
	t := svc.Tunables()
	switch name {
	case "gc_delay":
		t.GCDelay = time.Duration(v) * time.Second
	case "maxkeys":
		t.MaxKeys = int(v)
	case "maxbytes":
		t.MaxBytes = int(v)
	case "root_maxkeys":
		t.RootMaxKeys = int(v)
	case "root_maxbytes":
		t.RootMaxBytes = int(v)
	case "persistent_keyring_expiry":
		t.PersistentExpiry = time.Duration(v) * time.Second
	default:
		return keys.ENOENT
	}
	return svc.SetTunables(t)
}

// status reports the daemon's state in "name: value" lines.
func (s *Server) status() string {
	ss := s.Stats()
	st := s.svc.Domain().Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "keys: %d\n", s.svc.Keys())
	fmt.Fprintf(&b, "connections: %d\nprocesses: %d\n", ss.Conns, ss.Procs)
	fmt.Fprintf(&b, "buffered_bytes: %d\nexpensive_running: %d\nbig_key_files: %d\n", ss.BufferedBytes, ss.ExpensiveRunning, keys.BigKeyFiles())
	fmt.Fprintf(&b, "rcu_grace_periods: %d\n", st.GracePeriods)
	fmt.Fprintf(&b, "rcu_grace_period_p50: %v\nrcu_grace_period_p99: %v\nrcu_grace_period_max: %v\n",
		st.GracePeriodLatency.P50, st.GracePeriodLatency.P99, st.GracePeriodLatency.Max)
	fmt.Fprintf(&b, "rcu_callbacks_queued: %d\nrcu_callbacks_invoked: %d\nrcu_callback_backlog: %d\n",
		st.CallbacksQueued, st.CallbacksInvoked, st.CallbackBacklog)
	fmt.Fprintf(&b, "rcu_stalls: %d\n", st.Stalls)
	return b.String()
}
