package keys

import "fmt"

// GetPersistent links uid's persistent keyring (_persistent.UID) into dest
// and returns its serial (KEYCTL_GET_PERSISTENT); uid -1 means the
// caller's own. Each fetch resets its expiry to the persistent_keyring_
// expiry tunable; only a caller with CAP_SETUID may fetch another user's.
func (c *Caller) GetPersistent(uid int64, dest Serial) (Serial, error) {
	id, err := c.getPersistent(uid, dest)
	return id, wrap("keyctl_get_persistent", dest, err)
}

func (c *Caller) getPersistent(uid int64, destID Serial) (Serial, error) {
	if uid == -1 {
		uid = int64(c.cr().UID)
	}
	if uid < 0 || uid > 1<<32-2 {
		return 0, EINVAL
	}
	if uint32(uid) != c.cr().UID && !c.cr().Capable(CapSetUID) {
		return 0, EPERM
	}
	dest, err := c.lookupUserKey(destID, lookupCreate, Write)
	if err != nil {
		return 0, err
	}
	defer dest.put()
	if !dest.key.isKeyring() {
		return 0, ENOTDIR
	}
	pk, err := c.s.persistentKeyring(uint32(uid))
	if err != nil {
		return 0, err
	}
	defer pk.put()
	if !permitted(pk, c.cr(), true, Link) {
		return 0, EACCES
	}
	if err := c.s.linkInto(dest.key, pk.get(), true); err != nil {
		pk.put()
		return 0, err
	}
	exp := c.s.Tunables().PersistentExpiry
	pk.expiry.Store(c.s.now() + int64(exp))
	c.s.keyDied(pk)
	return pk.serial, nil
}

// persistentKeyring finds or creates uid's persistent keyring in the
// persistent register. The result holds a reference.
func (s *Service) persistentKeyring(uid uint32) (*Key, error) {
	s.specialMu.Lock()
	defer s.specialMu.Unlock()
	if s.persist == nil {
		reg, err := s.newKeyring(".persistent_register", 0, 0, PermPersistent, false, false, 0)
		if err != nil {
			return nil, err
		}
		s.persist = reg
	}
	name := fmt.Sprintf("_persistent.%d", uid)
	if l, ok := s.persist.loadRing().find(keyringType.Name, name); ok &&
		!l.key.has(flagRevoked|flagInvalidated) && l.key.tryGet() {
		return l.key, nil
	}
	k, err := s.newKeyring(name, uid, NoGID, PermPersistent, false, false, 0)
	if err != nil {
		return nil, err
	}
	if err := s.linkInto(s.persist, k.get(), false); err != nil {
		k.put()
		k.put()
		return nil, err
	}
	return k, nil
}
