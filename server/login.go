package server

import (
	"sync"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// On a host, nobody meets a process without a session keyring: at login,
// pam_keyinit gives the login a new anonymous session keyring (_ses) with
// the user keyring linked into it, and the login shell and everything it
// starts inherit it. A client of the daemon has no such step behind it:
// each ukeyctl started from a shell would be a process without a session,
// whose `@s` (with create semantics) is a session keyring of its own that
// dies with it, so that `ukeyctl add user k v @s` followed by
// `ukeyctl print %user:k` finds nothing.
//
// So the daemon does what pam_keyinit does, once per login, when it meets
// a process that has no session of its own (none inherited from an
// ancestor the daemon knows, no session token), or only another login's
// keyring (inherited from an ancestor outside its login): at the
// process's first request, it finds the process's login and gives the
// process that login's session keyring, made on first use.
//
// A login is a uid and a login id: the audit session id
// (/proc/<pid>/sessionid) where the system sets one (pam_loginuid does, at
// each login), else the POSIX session id (getsid). Its session keyring is
// kept by the login's anchor: the topmost of the process's ancestors,
// unbroken from the process upwards, that run as the same effective uid in
// the same login (the login shell, or the sshd process that serves the
// session, or the process itself if it leads its login). The daemon keeps
// the anchor as it keeps a parent given a session by session_to_parent: by
// pid and start time, followed by pidfd until it exits, so a reused pid is
// never taken for it. Every later process of the login descends from the
// anchor and inherits the keyring through its ancestry (ancestry.go), and
// the keyring goes when the anchor and every process that holds it have
// exited, as pam_keyinit's goes with the last process of the login.
//
// A login is never found by its number alone: a POSIX session id is a
// pid, free again once the session's last process has left it, and a
// later process of the user given that pid starts a session of the same
// number with setsid (on a busy host by accident). So the daemon keeps a
// login's keyring under a name that number cannot lend (loginName): the
// session leader's pid and start time, or, once the leader has exited, a
// process's own anchor. A process met for the first time after its
// session's leader has exited, such as the child of a job whose login
// shell is gone, therefore gets a login keyring of its own unless its
// ancestry gives it one, where the kernel would have kept the old one:
// the daemon cannot tell it from a stranger in a reused session.
//
// A process that joins or starts a session (`ukeyctl session`,
// `keyctl session`, a session token) keeps the kernel's behaviour
// exactly: the login is only for processes that have none. Where the
// daemon cannot follow processes by pid (no pidfds, no /proc), a process
// without a session keeps the kernel's fallback to its user-session
// keyring.

// loginID names a login: whether id is an audit session id or a POSIX
// session id, and which.
type loginID struct {
	audit bool
	id    uint64
}

// loginKey names the login of one user: a login's processes that run as
// another uid (after su, say) have a login of their own, and so do those
// of a later session given the same number (name, loginName).
type loginKey struct {
	uid   uint32
	login loginID
	name  procID
}

// loginTable is the login session keyrings the daemon keeps, while a
// process it keeps holds one. byKey is under s.mu, as the processes
// whose sessions prune it are; making serialises the making of a
// login's keyring, so that two processes of one login met at once share
// one (joinLogin), and is taken before s.mu, never inside it.
type loginTable struct {
	making sync.Mutex
	byKey  map[loginKey]*keys.Key
}

func newLoginTable() loginTable {
	return loginTable{byKey: make(map[loginKey]*keys.Key)}
}

// ofLocked returns the login whose keyring k is, if the daemon keeps
// one. s.mu is held.
func (t *loginTable) ofLocked(k *keys.Key) (loginKey, bool) {
	for id, lk := range t.byKey {
		if lk == k {
			return id, true
		}
	}
	return loginKey{}, false
}

// pruneLocked forgets the logins whose keyring no process the daemon
// keeps holds any more: held is every kept process's session. A login
// whose leader has exited needs no pruning to be safe: its name holds the
// leader's start time, which a later process given its pid does not
// share (loginName). s.mu is held.
func (t *loginTable) pruneLocked(held map[*keys.Key]bool) {
	for id, k := range t.byKey {
		if !held[k] {
			delete(t.byKey, id)
		}
	}
}

// loginRecord is a login's keyring handed over (handoverRecords).
type loginRecord struct {
	UID    uint32      `json:"uid"`
	Audit  bool        `json:"audit,omitempty"`
	ID     uint64      `json:"id"`
	Serial keys.Serial `json:"serial"`
	// The login's name beside its number (loginKey.name, loginName). A
	// record of an older daemon has none: an audit session's login is
	// found as before (its number is never given twice), a POSIX one's by
	// no process, and its keyring lives on with the processes that hold
	// it.
	AnchorPID   int    `json:"anchor_pid,omitempty"`
	AnchorStart string `json:"anchor_start,omitempty"`
}

// recordsLocked returns the logins to hand over. s.mu is held.
func (t *loginTable) recordsLocked() []loginRecord {
	var recs []loginRecord
	for id, k := range t.byKey {
		recs = append(recs, loginRecord{UID: id.uid, Audit: id.login.audit, ID: id.login.id, Serial: k.Serial(),
			AnchorPID: id.name.pid, AnchorStart: id.name.start})
	}
	return recs
}

// restoreLocked keeps again the logins handed over whose keyrings came
// with the keys. s.mu is held.
func (t *loginTable) restoreLocked(rs *keys.Restore, recs []loginRecord) {
	for _, lr := range recs {
		if k := rs.Key(lr.Serial); k != nil && k.IsKeyring() {
			t.byKey[loginKey{uid: lr.UID, login: loginID{audit: lr.Audit, id: lr.ID}, name: procID{pid: lr.AnchorPID, start: lr.AnchorStart}}] = k
		}
	}
}

// usesSession reports whether an operation acts on keys, where the
// caller's session (its keyring, and what it possesses through it)
// counts: the first such request settles the caller's session. The
// others need none; and joining a session, or presenting a token, is the
// process choosing its own.
func usesSession(op wire.Op) bool {
	switch op {
	case wire.OpJoinSession, wire.OpSessionAttach, wire.OpCapabilities, wire.OpSysctlGet, wire.OpSysctlSet,
		wire.OpStatus, wire.OpProcKeyUsers, wire.OpWatchNext, wire.OpIntercept:
		return false
	}
	return true
}

// settleSession gives p the session of its login if it has no session of
// its own or only another login's, once, at its first request that uses
// one (usesSession).
func (s *Server) settleSession(p *proc) {
	if s.cfg.NoLogins || !process.LoginSupported || p.private || p.settled.Load() {
		return
	}
	if !p.settled.CompareAndSwap(false, true) || (p.caller.OwnSession() && !p.caller.InLogin()) {
		return
	}
	s.joinLogin(p)
}

// loginHolds reports whether c's session is a keyring of login id of uid
// (inherited from an ancestor, whatever that ancestor's anchor). A login
// keyring the daemon has lost track of (none of the logins it keeps has
// it: no process it keeps held it) is taken to be that login's, and kept
// from then on under the caller's name (name, read only then); one that
// another login has is not: a process that left its parent's login
// (setsid, where no audit session joins the two) has a login of its own,
// as it would were the parent unknown to the daemon, so that what a
// process sees as @s never depends on whether its parent happened to be a
// client.
func (s *Server) loginHolds(c *keys.Caller, uid uint32, id loginID, name func() procID) bool {
	if !c.InLogin() {
		return false
	}
	k := c.Session()
	s.mu.Lock()
	key, known := s.logins.ofLocked(k)
	s.mu.Unlock()
	if known {
		return key.uid == uid && key.login == id
	}
	key = loginKey{uid: uid, login: id, name: name()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, known := s.logins.ofLocked(k); known { // found meanwhile
		return other.uid == uid && other.login == id
	}
	if s.logins.byKey[key] != nil {
		return false
	}
	s.logins.byKey[key] = k
	return true
}

// joinLogin gives p its login's session keyring, and the login's anchor
// too if the daemon keeps one; where anything stands in the way (the
// quota is full, /proc cannot be read), p keeps the kernel's behaviour of
// a process without a session.
func (s *Server) joinLogin(p *proc) {
	pid := p.handle.PID()
	cred := p.caller.Cred()
	id, ok := loginOf(pid)
	if !ok || p.start == "" {
		return
	}
	var anchor procID // read once, if needed: it walks the ancestry
	anchorOf := func() procID {
		if anchor.pid == 0 {
			anchor = loginAnchor(pid, p.start, id, cred.UID)
		}
		return anchor
	}
	var name procID // read once, if needed
	named := false
	nameOf := func() procID {
		if !named {
			name, named = loginName(id, anchorOf), true
		}
		return name
	}
	if s.loginHolds(p.caller, cred.UID, id, nameOf) {
		return // inherited from an ancestor in its login
	}
	key := loginKey{uid: cred.UID, login: id, name: nameOf()}
	var a *proc
	if anchorOf().pid != pid {
		// Not when it is p itself: p then leads its login, whose keyring
		// goes when p and every other process holding it have exited.
		a, _ = s.knownProc(anchor.pid, anchor.start, cred)
	}
	s.logins.making.Lock()
	defer s.logins.making.Unlock()
	if p.caller.OwnSession() && !p.caller.InLogin() {
		return // it joined a session meanwhile
	}
	// The login's keyring: the anchor's, or the one other processes of
	// the login hold, or else a new one.
	var k *keys.Key
	anchorHolds := a != nil && s.loginHolds(a.caller, cred.UID, id, nameOf)
	switch {
	case anchorHolds:
		k = a.caller.Session()
	default:
		s.mu.Lock()
		k = s.logins.byKey[key]
		s.mu.Unlock()
	}
	if k == nil || p.caller.SetSession(k) != nil {
		var err error
		if k, err = s.svc.LoginSession(cred); err != nil {
			return
		}
		defer k.Put()
		p.caller.SetSession(k)
	}
	if a != nil && !anchorHolds && (!a.caller.OwnSession() || a.caller.InLogin()) {
		a.caller.SetSession(k)
	}
	s.mu.Lock()
	s.logins.byKey[key] = k
	s.mu.Unlock()
}

// loginName is what, beside the uid and the login's number, names a
// login among the logins the daemon keeps, so that no later login given
// the same number is mistaken for it. An audit session id is never given
// twice (the kernel counts them up), so it needs nothing more. A POSIX
// session id is its leader's pid, free again once the session's last
// process has left it, after which a process of the user given that pid
// starts a session of the same number with setsid: such a login is named
// by its leader's start time too, read while the leader still leads it.
// Once the leader has exited (its pid may be another's), a process met
// for the first time is named by its own anchor (anchorOf, the topmost
// of its ancestors in the login): it shares the login's keyring only
// with its own line, as the kernel's inheritance would, and never with
// a stranger in a session of the same number.
func loginName(id loginID, anchorOf func() procID) procID {
	if id.audit {
		return procID{}
	}
	sid := int(id.id)
	if st, ok := procfs.ReadStat(sid); ok && st.SID == sid {
		if again, ok := procfs.ReadStat(sid); ok && again.Start == st.Start && again.SID == sid {
			return procID{pid: sid, start: st.Start}
		}
	}
	return anchorOf()
}

// loginAnchor returns the anchor of process pid's login: the topmost
// ancestor of an unbroken line from pid upwards whose processes are in
// login and run as uid, or pid itself.
func loginAnchor(pid int, start string, login loginID, uid uint32) procID {
	_, ancestors := ancestry(pid)
	anchor := procID{pid: pid, start: start}
	for _, a := range ancestors {
		l, ok := loginOf(a.pid)
		if !ok || l != login {
			break
		}
		if euid, ok := process.EffectiveUID(a.pid); !ok || euid != uid {
			break
		}
		// Read again: what was read is a.pid's only if it is still the
		// process the ancestry named.
		if _, again, ok := process.Stat(a.pid); !ok || again != a.start {
			break
		}
		anchor = a
	}
	return anchor
}

// loginOf returns the login of process pid ([process.Login]).
func loginOf(pid int) (loginID, bool) {
	id, audit, ok := process.Login(pid)
	return loginID{audit: audit, id: id}, ok
}
