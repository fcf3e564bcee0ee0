package keys

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Cred is who a caller is: the daemon learns it from the socket, never
// from what the client claims.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
	PID      int
	// Caps is the caller's effective capability set, bit n for Linux
	// capability n (CapSysAdmin, CapSetUID), which the kernel's
	// capable() checks; CapsKnown says whether it was learnt. A caller
	// whose capabilities are not known (no capability sets on its
	// system, or a process the daemon cannot see) is privileged if and
	// only if its uid is 0.
	Caps      uint64
	CapsKnown bool
}

// The capabilities the key retention service checks.
const (
	CapSetUID   = 7  // CAP_SETUID: another user's persistent keyring
	CapSysAdmin = 21 // CAP_SYS_ADMIN: chown and setperm of others' keys
)

// Capable reports whether the caller holds capability cap, as the
// kernel's capable(): from its effective set when known, else root.
func (c *Cred) Capable(cap int) bool {
	if !c.CapsKnown {
		return c.UID == 0
	}
	return cap >= 0 && cap < 64 && c.Caps&(1<<cap) != 0
}

func (c *Cred) inGroup(gid uint32) bool {
	return gid == c.GID || slices.Contains(c.Groups, gid)
}

// Caller is one client of the service with its credentials and its
// process-scoped keyrings: what the kernel keeps in a task's cred. The
// daemon makes one per client process; Release drops its keyrings when
// the process goes away. A Caller is safe for concurrent use.
type Caller struct {
	s *Service
	// cred is replaced whole when the caller's credentials change
	// (SetCred), as the kernel's commit_creds replaces a task's cred;
	// an operation reads it once per check (cr).
	cred atomic.Pointer[Cred]

	// mu serialises changes of the keyring slots below. The slots are
	// atomic so that searches, which run in rcu read sections, read them
	// without the lock: a key replaced in a slot is put only after the
	// store, and it is destroyed only after a grace period.
	mu       sync.Mutex
	thread   atomic.Pointer[Key]
	process  atomic.Pointer[Key]
	session  atomic.Pointer[Key]
	auth     atomic.Pointer[Key] // assumed request-key authority
	jit      reqKeyDest
	released bool
}

// NewCaller returns a caller with the given credentials and no thread,
// process or session keyring yet.
func (s *Service) NewCaller(cred Cred) *Caller {
	cred.Groups = slices.Clone(cred.Groups)
	c := &Caller{s: s}
	c.cred.Store(&cred)
	return c
}

// Cred returns the caller's credentials.
func (c *Caller) Cred() Cred { return *c.cr() }

// cr returns the caller's credentials as they are now.
func (c *Caller) cr() *Cred { return c.cred.Load() }

// SetCred replaces the caller's credentials (its pid stays), as a task's
// setuid, setgid, setgroups or capset commits new ones in the kernel:
// its keyrings stay, and its thread keyring, which the kernel keeps
// owned by the thread's current fsuid and fsgid, changes owner with it.
func (c *Caller) SetCred(cred Cred) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cr()
	cred.PID = old.PID
	cred.Groups = slices.Clone(cred.Groups)
	c.cred.Store(&cred)
	if t := c.thread.Load(); t != nil {
		t.uid.Store(cred.UID)
		t.gid.Store(cred.GID)
	}
}

// Exec drops the caller's thread and process keyrings, as the kernel's
// execve does: a program starts with neither and keeps its session.
func (c *Caller) Exec() {
	c.mu.Lock()
	t, p := c.thread.Swap(nil), c.process.Swap(nil)
	c.mu.Unlock()
	t.put()
	p.put()
}

// Release drops the caller's references to its keyrings, as a process's
// exit does. The caller must not be used afterwards.
func (c *Caller) Release() {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return
	}
	c.released = true
	t, p, s, a := c.thread.Swap(nil), c.process.Swap(nil), c.session.Swap(nil), c.auth.Swap(nil)
	c.mu.Unlock()
	for _, k := range []*Key{t, p, s, a} {
		k.put()
	}
}

// NewThread returns a caller for another thread of c's process, as the
// kernel's clone with CLONE_THREAD makes one: a copy of c's credentials
// as they are now, with c's session and process keyrings (the process
// keyring is shared by the threads that existed when it was made; one a
// thread makes later is that thread's alone, as in the kernel, where it
// is installed in the making thread's credentials only), its request_key
// default, and no thread keyring.
func (c *Caller) NewThread() *Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &Caller{s: c.s, jit: c.jit}
	cred := *c.cr()
	cred.Groups = slices.Clone(cred.Groups)
	t.cred.Store(&cred)
	if k := c.session.Load(); k != nil {
		t.session.Store(k.get())
	}
	if k := c.process.Load(); k != nil {
		t.process.Store(k.get())
	}
	return t
}

// Fork returns a caller for a child process: the same credentials and
// session keyring, no thread or process keyring (as fork does).
func (c *Caller) Fork(pid int) *Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	child := &Caller{s: c.s, jit: c.jit}
	cred := *c.cr()
	cred.PID = pid
	cred.Groups = slices.Clone(cred.Groups)
	child.cred.Store(&cred)
	if k := c.session.Load(); k != nil {
		child.session.Store(k.get())
	}
	return child
}

// Inherit gives c what a child process has of its parent's credentials
// at fork and keeps across exec and setuid: the parent's session keyring
// and its request_key default destination, c keeping its own identity.
// A parent that has no session of its own (it falls back to its user's
// user-session keyring) passes none on: the child falls back to its own
// user's. It reports whether a session was inherited.
func (c *Caller) Inherit(parent *Caller) bool {
	parent.mu.Lock()
	k := parent.session.Load()
	if k != nil && (k.has(flagUIDKeyring) || !k.tryGet()) {
		k = nil
	}
	jit := parent.jit
	parent.mu.Unlock()
	c.mu.Lock()
	c.jit = jit
	var old *Key
	if k != nil {
		old = c.session.Swap(k)
	}
	c.mu.Unlock()
	old.put()
	return k != nil
}

// keyrings returns the caller's own keyrings without references: the
// caller of keyrings must be in an rcu read section (or hold the keys
// otherwise) for as long as it uses them.
func (c *Caller) keyrings() (thread, process, session *Key) {
	return c.thread.Load(), c.process.Load(), c.session.Load()
}

// assumed returns the assumed authorisation key, without a reference (as
// keyrings).
func (c *Caller) assumed() *Key { return c.auth.Load() }

// Session returns the caller's session keyring, or nil.
func (c *Caller) Session() *Key { return c.session.Load() }

// SetSession installs k (which must be a keyring) as the caller's session
// keyring, taking a reference; the daemon uses it when a process proves it
// belongs to a session.
func (c *Caller) SetSession(k *Key) error {
	if k != nil && !k.isKeyring() {
		return ENOTDIR
	}
	if k != nil && !k.tryGet() {
		return ENOKEY
	}
	c.mu.Lock()
	old := c.session.Swap(k)
	c.mu.Unlock()
	old.put()
	return nil
}

// OwnSession reports whether the caller has a session keyring of its
// own: one it joined, inherited or was given, not the fallback to its
// user-session keyring that a process without a session searches.
func (c *Caller) OwnSession() bool {
	k := c.session.Load()
	return k != nil && !k.has(flagUIDKeyring)
}

// InLogin reports whether the caller's session keyring is one the daemon
// made for a login (LoginSession) rather than one the process chose.
func (c *Caller) InLogin() bool {
	k := c.session.Load()
	return k != nil && k.has(flagLogin)
}

// LoginSession makes a session keyring for a login of cred's user, as
// pam_keyinit does when a user logs in: a new anonymous session keyring
// (_ses) owned by the user, charged to the user's quota (which, as for a
// process without a session, it may overrun), with the user keyring
// linked into it so that a search from the session finds the user's keys.
// The keyring comes with one reference: the daemon gives the keyring to
// the processes of the login (SetSession, Inherit) and then puts it.
func (s *Service) LoginSession(cred Cred) (*Key, error) {
	user, _, err := s.userKeyrings(cred.UID)
	if err != nil {
		return nil, err
	}
	k, err := s.newKeyring("_ses", cred.UID, cred.GID, PermSessionAnon, true, true, flagLogin)
	if err != nil {
		return nil, err
	}
	if !user.tryGet() {
		k.put()
		return nil, ENOKEY
	}
	if err := s.linkInto(k, user, false); err != nil {
		user.put()
		k.put()
		return nil, err
	}
	return k, nil
}

// Put drops a reference to k that the caller was given (LoginSession).
func (k *Key) Put() { k.put() }

// newKeyring allocates and instantiates an empty keyring.
func (s *Service) newKeyring(desc string, uid, gid uint32, perm Perm, quota, overrun bool, flags uint32) (*Key, error) {
	k, err := s.alloc(keySpec{typ: keyringType, desc: desc, uid: uid, gid: gid, perm: perm, quota: quota, overrun: overrun, flags: flags})
	if err != nil {
		return nil, err
	}
	s.markInstantiated(k)
	return k, nil
}

// markInstantiated makes a freshly allocated key positive.
func (s *Service) markInstantiated(k *Key) {
	k.state.Store(statePositive)
	k.quota.mu.Lock()
	k.quota.nikeys++
	k.quota.mu.Unlock()
}

// installThread creates the caller's thread keyring if it has none.
func (c *Caller) installThread() (*Key, error) {
	return c.installSlot(&c.thread, "_tid")
}

func (c *Caller) installProcess() (*Key, error) {
	return c.installSlot(&c.process, "_pid")
}

func (c *Caller) installSlot(slot *atomic.Pointer[Key], name string) (*Key, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := slot.Load(); k != nil {
		return k, nil
	}
	k, err := c.s.newKeyring(name, c.cr().UID, c.cr().GID, PermThreadProcess, false, true, 0)
	if err != nil {
		return nil, err
	}
	slot.Store(k)
	return k, nil
}

// userKeyrings returns the caller's user keyring (_uid.N) and user-session
// keyring (_uid_ses.N), creating them in the service's register if they
// do not exist, as the kernel's look_up_user_keyrings does.
func (s *Service) userKeyrings(uid uint32) (user, userSession *Key, err error) {
	s.specialMu.Lock()
	defer s.specialMu.Unlock()
	reg, err := s.userRegister()
	if err != nil {
		return nil, nil, err
	}
	find := func(desc string) (*Key, error) {
		sc := &search{typ: keyringType.Name, desc: desc, stateCheck: true, now: s.now()}
		return sc.tree(reg, true)
	}
	uname, sname := fmt.Sprintf("_uid.%d", uid), fmt.Sprintf("_uid_ses.%d", uid)
	user, err = find(uname)
	if err == errAgain {
		if user, err = s.newKeyring(uname, uid, NoGID, PermUserKeyring, true, false, flagUIDKeyring); err != nil {
			return nil, nil, err
		}
		if err = s.linkInto(reg, user, false); err != nil {
			user.put()
			return nil, nil, err
		}
	} else if err != nil {
		return nil, nil, err
	}
	userSession, err = find(sname)
	if err == errAgain {
		if userSession, err = s.newKeyring(sname, uid, NoGID, PermUserKeyring, true, false, flagUIDKeyring); err != nil {
			return nil, nil, err
		}
		if user.tryGet() {
			if err = s.linkInto(userSession, user, false); err != nil {
				user.put()
				userSession.put()
				return nil, nil, err
			}
		}
		if err = s.linkInto(reg, userSession, false); err != nil {
			userSession.put()
			return nil, nil, err
		}
	} else if err != nil {
		return nil, nil, err
	}
	return user, userSession, nil
}

// existingUserKeyring returns uid's user-session (session true) or user
// keyring if it exists, without creating it.
func (s *Service) existingUserKeyring(uid uint32, session bool) *Key {
	s.specialMu.Lock()
	reg := s.register
	s.specialMu.Unlock()
	if reg == nil {
		return nil
	}
	name := fmt.Sprintf("_uid.%d", uid)
	if session {
		name = fmt.Sprintf("_uid_ses.%d", uid)
	}
	l, ok := reg.loadRing().find(keyringType.Name, name)
	if !ok {
		return nil
	}
	return l.key
}

// userRegister returns the register keyring that holds every user's
// _uid.N and _uid_ses.N. Called with specialMu held.
func (s *Service) userRegister() (*Key, error) {
	if s.register != nil {
		return s.register, nil
	}
	k, err := s.newKeyring(".user_reg", 0, NoGID, PermRegister, true, true, 0)
	if err != nil {
		return nil, err
	}
	s.register = k
	return k, nil
}

// joinSession replaces the caller's session keyring: with name nil a new
// anonymous one (_ses); otherwise an existing keyring of that name that
// the caller may search, or a new one of that name. It returns the
// serial, or 0 when the named keyring already was the session keyring.
func (c *Caller) joinSession(name *string) (Serial, error) {
	s := c.s
	if name == nil {
		c.mu.Lock()
		had := c.session.Load() != nil
		c.mu.Unlock()
		k, err := s.newKeyring("_ses", c.cr().UID, c.cr().GID, PermSessionAnon, had, !had, 0)
		if err != nil {
			return 0, err
		}
		c.replaceSession(k)
		return k.serial, nil
	}
	// As the kernel's join_session_keyring: the oldest keyring of that
	// name that the caller may search without possessing it, if any;
	// otherwise a new one.
	s.specialMu.Lock()
	defer s.specialMu.Unlock()
	for _, k := range s.keyringsNamed(*name) {
		if k.has(flagRevoked|flagInvalidated|flagDead) || k.loadRing() == nil {
			continue
		}
		if !permitted(k, c.cr(), false, Search) || !k.tryGet() {
			continue
		}
		c.mu.Lock()
		same := c.session.Load() == k
		c.mu.Unlock()
		if same {
			k.put()
			return 0, nil
		}
		c.replaceSession(k)
		return k.serial, nil
	}
	k, err := s.newKeyring(*name, c.cr().UID, c.cr().GID, PermSessionNamed, true, false, 0)
	if err != nil {
		return 0, err
	}
	c.replaceSession(k)
	return k.serial, nil
}

// RevokeSession gives the caller a revoked session keyring in place of
// its own, as a process whose session keyring was revoked has: every use
// of @s then fails with EKEYREVOKED, and searches find nothing there,
// until the process joins or starts another session. The daemon uses it
// for a process that presents a session token naming no live session
// (the daemon restarted, say): falling back to a fresh session instead
// would lose whatever the process then adds to @s. The keyring is not
// charged to the caller's quota.
func (c *Caller) RevokeSession() error {
	k, err := c.s.newKeyring("_ses", c.cr().UID, c.cr().GID, PermSessionAnon, false, true, 0)
	if err != nil {
		return err
	}
	c.s.revoke(k)
	c.replaceSession(k)
	return nil
}

// replaceSession installs k (whose reference it takes over) as the session
// keyring.
func (c *Caller) replaceSession(k *Key) {
	c.mu.Lock()
	old := c.session.Swap(k)
	c.mu.Unlock()
	old.put()
}

// lookupFlags modify what lookupUserKey accepts.
type lookupFlags uint8

const (
	lookupCreate  lookupFlags = 1 << iota // create special keyrings that do not exist
	lookupPartial                         // accept uninstantiated and negative keys
	// lookupUnpossessed skips the possession search (set for needUnlink, whose
	// check ignores possession): in a keyring of a million links the
	// search is a quarter of what an unlink costs.
	lookupUnpossessed
)

// Rights a lookup may need beyond the permission bits.
const (
	needUnlink Perm = 1 << 30 // existence only: no permission, no validity
	needDefer  Perm = 1 << 31 // caller checks permission itself
)

// ref is a key found by a lookup, with whether the caller possesses it.
// It holds a reference to the key: release it with put.
type ref struct {
	key       *Key
	possessed bool
}

func (r ref) put() { r.key.put() }

// special returns one of the caller's keyrings with a reference taken.
func (c *Caller) special(slot *atomic.Pointer[Key]) *Key {
	// Under mu: a slot's key is put only after it left the slot, and
	// slots change under mu, so the key in it still holds a reference.
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := slot.Load(); k != nil {
		return k.get()
	}
	return nil
}

// lookupUserKey resolves an id as the kernel's lookup_user_key does:
// special ids to the caller's keyrings (created with lookupCreate),
// positive ids through the serial index; then validity (which takes
// precedence over permission), then the permission check with possession.
// The returned ref holds a reference to the key.
func (c *Caller) lookupUserKey(id Serial, flags lookupFlags, need Perm) (ref, error) {
	if need == needUnlink {
		flags |= lookupUnpossessed
	}
	r, err := c.resolve(id, flags)
	if err != nil {
		return ref{}, err
	}
	if err := c.checkRef(r, flags, need); err != nil {
		r.put()
		return ref{}, err
	}
	return r, nil
}

func (c *Caller) resolve(id Serial, flags lookupFlags) (ref, error) {
	s := c.s
	switch {
	case id == ThreadKeyring || id == ProcessKeyring:
		slot, install := &c.thread, c.installThread
		if id == ProcessKeyring {
			slot, install = &c.process, c.installProcess
		}
		k := c.special(slot)
		if k == nil {
			if flags&lookupCreate == 0 {
				return ref{}, ENOKEY
			}
			if _, err := install(); err != nil {
				return ref{}, err
			}
			if k = c.special(slot); k == nil {
				return ref{}, ENOKEY
			}
		}
		return ref{k, true}, nil
	case id == SessionKeyring:
		c.mu.Lock()
		sess := c.session.Load()
		c.mu.Unlock()
		// As the kernel's lookup_user_key: the user keyrings are made (and
		// charged to the user's quota) only for a caller without a session,
		// which falls back to its user-session keyring.
		var us *Key
		if sess == nil {
			var err error
			if _, us, err = s.userKeyrings(c.cr().UID); err != nil {
				return ref{}, err
			}
		}
		switch {
		case flags&lookupCreate != 0 && (sess == nil || sess.has(flagUIDKeyring)):
			if _, err := c.joinSession(nil); err != nil {
				return ref{}, err
			}
		case sess == nil:
			if us.tryGet() {
				c.mu.Lock()
				if c.session.Load() == nil {
					c.session.Store(us)
					us = nil
				}
				c.mu.Unlock()
				us.put()
			}
		}
		k := c.special(&c.session)
		if k == nil {
			return ref{}, ENOKEY
		}
		return ref{k, true}, nil
	case id == UserKeyring || id == UserSessionKeyring:
		u, us, err := s.userKeyrings(c.cr().UID)
		if err != nil {
			return ref{}, err
		}
		k := u
		if id == UserSessionKeyring {
			k = us
		}
		if !k.tryGet() {
			return ref{}, ENOKEY
		}
		return ref{k, true}, nil
	case id == GroupKeyring:
		return ref{}, EINVAL
	case id == ReqKeyAuthKey:
		a := c.special(&c.auth)
		if a == nil {
			return ref{}, ENOKEY
		}
		return ref{a, true}, nil
	case id == RequestorKeyring:
		a := c.assumed()
		if a == nil || a.authRec() == nil || a.authRec().dest == nil {
			return ref{}, ENOKEY
		}
		if a.has(flagRevoked) {
			return ref{}, EKEYREVOKED
		}
		if !a.authRec().dest.tryGet() {
			return ref{}, ENOKEY
		}
		return ref{a.authRec().dest, true}, nil
	case id <= 0:
		return ref{}, EINVAL
	}
	k := s.lookup(id)
	if k == nil || !k.tryGet() {
		return ref{}, ENOKEY
	}
	if flags&lookupUnpossessed != 0 {
		return ref{k, false}, nil
	}
	return ref{k, c.possesses(k)}, nil
}

// checkRef applies lookupUserKey's validity and permission checks.
func (c *Caller) checkRef(r ref, flags lookupFlags, need Perm) error {
	k := r.key
	if need == needUnlink {
		return nil
	}
	now := c.s.now()
	if flags&lookupPartial == 0 {
		if err := c.waitConstructed(k); err != nil {
			return err
		}
		if need != needDefer {
			if err := k.negativeErr(); err != nil {
				return err
			}
			if err := k.validate(now); err != nil {
				return err
			}
		}
	} else if need != needDefer {
		if err := k.validate(now); err != nil {
			return err
		}
	}
	if need != needDefer && need != 0 && !permitted(k, c.cr(), r.possessed, need) {
		return EACCES
	}
	return nil
}

// GetKeyringID returns the serial of the key an id names
// (KEYCTL_GET_KEYRING_ID), creating a special keyring if create is set.
func (c *Caller) GetKeyringID(id Serial, create bool) (Serial, error) {
	var flags lookupFlags
	if create {
		flags = lookupCreate
	}
	r, err := c.lookupUserKey(id, flags, Search)
	if err != nil {
		return 0, wrap("keyctl_get_keyring_ID", id, err)
	}
	defer r.put()
	return r.key.serial, nil
}

// JoinSessionKeyring gives the caller a new anonymous session keyring
// (name nil) or joins or creates the named one (KEYCTL_JOIN_SESSION_KEYRING).
// It returns 0 if the named keyring already was the session keyring.
func (c *Caller) JoinSessionKeyring(name *string) (Serial, error) {
	if name != nil {
		if len(*name) > MaxDescription || *name == "" {
			return 0, wrap("keyctl_join_session_keyring", 0, EINVAL)
		}
		if (*name)[0] == '.' {
			return 0, wrap("keyctl_join_session_keyring", 0, EPERM)
		}
	}
	id, err := c.joinSession(name)
	return id, wrap("keyctl_join_session_keyring", 0, err)
}
