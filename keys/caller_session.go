package keys

import (
	"fmt"
	"sync/atomic"
)

// LoginSession makes a session keyring for a login of cred's user, as
// pam_keyinit does when a user logs in: a new anonymous session keyring
// (_ses) owned by the user, charged to the user's quota (which, as for a
// process without a session, it may overrun), with the user keyring linked
// into it so that a search from the session finds the user's keys. The
// keyring comes with one reference: the daemon gives the keyring to the
// processes of the login ([Caller.SetSession], [Caller.Inherit]) and then
// puts it.
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

// Put drops a reference to k that the caller was given
// ([Service.LoginSession]).
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
// of @s then fails with [EKEYREVOKED], and searches find nothing there,
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
