package keys

import (
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
	// CapsIf is a capability set that counts only if CapsIn says so
	// when a capability is checked: an intercepted caller's, whose
	// effective set counts only in the daemon's user namespace, which
	// costs a system call to learn that most calls never need. Nothing
	// that reads Caps alone sees them. CapsIn is the moment's, not
	// handed over ([Caller.State]): without it CapsIf count for nothing.
	CapsIf uint64
	CapsIn CapsSource `json:"-"`
}

// A CapsSource says whether a caller's conditional capabilities
// ([Cred.CapsIf]) count: asked at a capability check, so at most once
// per check. An error learning it is an answer of false.
type CapsSource interface {
	CapsCount() bool
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
	if cap < 0 || cap >= 64 {
		return false
	}
	if c.Caps&(1<<cap) != 0 {
		return true
	}
	return c.CapsIf&(1<<cap) != 0 && c.CapsIn != nil && c.CapsIn.CapsCount()
}

func (c *Cred) inGroup(gid uint32) bool {
	return gid == c.GID || slices.Contains(c.Groups, gid)
}

// Caller is one client of the service with its credentials and its
// process-scoped keyrings: what the kernel keeps in a task's cred. The
// daemon makes one per client process; [Caller.Release] drops its keyrings
// when the process goes away. A Caller is safe for concurrent use.
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
// made for a login ([Service.LoginSession]) rather than one the process
// chose.
func (c *Caller) InLogin() bool {
	k := c.session.Load()
	return k != nil && k.has(flagLogin)
}
