package keys

import "sync/atomic"

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
