package keys

import (
	"fmt"
	"time"
)

// Revoke revokes a key (KEYCTL_REVOKE): it becomes unusable at once, its
// payload is wiped after a grace period, and the collector prunes links to
// it once gc_delay has passed.
func (c *Caller) Revoke(id Serial) error {
	r, err := c.lookupUserKey(id, 0, Write)
	if err == EACCES {
		r, err = c.lookupUserKey(id, 0, SetAttr)
	}
	if err != nil {
		return wrap("keyctl_revoke", id, err)
	}
	defer r.put()
	c.s.revoke(r.key)
	return nil
}

func (s *Service) revoke(k *Key) {
	k.mu.Lock()
	if k.setFlag(flagRevoked) {
		k.mu.Unlock()
		return
	}
	k.expiry.Store(s.now())
	old := k.swapPayload(nil)
	if c := payloadCharge(k); old != nil && c != 0 {
		s.adjust(k.quota, -c)
		k.quotalen -= int32(c)
	}
	// A revoked keyring is cleared, its links dropped by the collector.
	var links *ringSnap
	if k.isKeyring() {
		if links = s.detachRing(k, &ringSnap{}); links != nil {
			s.chargeLink(k, -linkCost*links.n)
		}
	}
	k.mu.Unlock()
	s.retire(k, old)
	s.releaseLinks(k, links, true)
	notify(k, NotifyRevoked, 0)
	s.keyDied(k)
}

// keyDied tells the collector that k has a reason to be reaped.
func (s *Service) keyDied(k *Key) {
	if k.has(flagInvalidated) {
		s.gcol.requestPass(true) // invalidated keys are reaped at once
		return
	}
	if e := k.expiry.Load(); e != 0 {
		s.gcol.scheduleAt(e + int64(s.Tunables().GCDelay))
	}
}

// Invalidate invalidates a key (KEYCTL_INVALIDATE): it is treated as
// absent at once and reaped without waiting for gc_delay.
func (c *Caller) Invalidate(id Serial) error {
	r, err := c.lookupUserKey(id, 0, Search)
	if err != nil {
		return wrap("keyctl_invalidate", id, err)
	}
	defer r.put()
	c.s.invalidate(r.key)
	return nil
}

func (s *Service) invalidate(k *Key) {
	if k.setFlag(flagInvalidated) {
		return
	}
	notify(k, NotifyInvalidated, 0)
	s.keyDied(k)
}

// Chown changes a key's owner and/or group (KEYCTL_CHOWN); -1 leaves one
// unchanged. Only a caller with CAP_SYS_ADMIN may give a key away or to a group
// it is not in; the new owner's quota is charged.
func (c *Caller) Chown(id Serial, uid, gid int64) error {
	return wrap("keyctl_chown", id, c.chown(id, uid, gid))
}

func (c *Caller) chown(id Serial, uid, gid int64) error {
	if uid < -1 || uid > 1<<32-2 || gid < -1 || gid > 1<<32-2 {
		return EINVAL
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	r, err := c.lookupUserKey(id, lookupCreate|lookupPartial, SetAttr)
	if err != nil {
		return err
	}
	defer r.put()
	k := r.key
	k.mu.Lock()
	err = c.chownLocked(k, uid, gid)
	k.mu.Unlock()
	if err == nil {
		notify(k, NotifySetAttr, 0)
	}
	return err
}

func (c *Caller) chownLocked(k *Key, uid, gid int64) error {
	if uid != -1 && uint32(uid) != k.uid.Load() && !c.cr().Capable(CapSysAdmin) {
		return EACCES
	}
	if gid != -1 && uint32(gid) != k.gid.Load() && !c.cr().inGroup(uint32(gid)) && !c.cr().Capable(CapSysAdmin) {
		return EACCES
	}
	if uid != -1 && uint32(uid) != k.uid.Load() {
		nu := c.s.quotaFor(uint32(uid))
		if k.has(flagInQuota) {
			if err := c.s.charge(nu, int(k.quotalen), false); err != nil {
				c.s.quotaPut(nu)
				return err
			}
			c.s.uncharge(k.quota, int(k.quotalen))
		}
		ou := k.quota
		inst := k.state.Load() != stateUninstantiated
		ou.mu.Lock()
		ou.nkeys--
		if inst {
			ou.nikeys--
		}
		ou.mu.Unlock()
		nu.mu.Lock()
		nu.nkeys++
		if inst {
			nu.nikeys++
		}
		nu.mu.Unlock()
		k.quota = nu
		c.s.quotaPut(ou)
		k.uid.Store(uint32(uid))
	}
	if gid != -1 {
		k.gid.Store(uint32(gid))
	}
	return nil
}

// SetPerm sets a key's permission mask (KEYCTL_SETPERM). Only the owner
// or a caller with CAP_SYS_ADMIN may.
func (c *Caller) SetPerm(id Serial, perm Perm) error {
	if perm&^PermMask != 0 {
		return wrap("keyctl_setperm", id, EINVAL)
	}
	r, err := c.lookupUserKey(id, lookupCreate|lookupPartial, SetAttr)
	if err != nil {
		return wrap("keyctl_setperm", id, err)
	}
	defer r.put()
	k := r.key
	// The owner checked and the mask stored under the key's lock, which
	// chown takes too (the kernel holds key->sem): else an owner's
	// setperm racing a chown away from it could land after the new
	// owner's, and overwrite its mask.
	k.mu.Lock()
	if k.uid.Load() != c.cr().UID && !c.cr().Capable(CapSysAdmin) {
		k.mu.Unlock()
		return wrap("keyctl_setperm", id, EACCES)
	}
	k.perm.Store(uint32(perm))
	k.mu.Unlock()
	notify(k, NotifySetAttr, 0)
	return nil
}

// Description is what KEYCTL_DESCRIBE reports about a key.
type Description struct {
	Type        string
	UID, GID    int64
	Perm        Perm
	Description string
}

// String renders it as the kernel does: "type;uid;gid;perm;description".
func (d Description) String() string {
	return fmt.Sprintf("%s;%d;%d;%08x;%s", d.Type, d.UID, d.GID, uint32(d.Perm), d.Description)
}

// Describe returns a key's attributes (KEYCTL_DESCRIBE). A request-key
// helper holding the authorisation for the key may describe it without
// [View] permission.
func (c *Caller) Describe(id Serial) (Description, error) {
	r, err := c.lookupUserKey(id, lookupPartial, View)
	if err == EACCES {
		if o, oerr := c.authOverride(id); oerr == nil {
			r, err = o, nil
		}
	}
	if err != nil {
		return Description{}, wrap("keyctl_describe", id, err)
	}
	defer r.put()
	k := r.key
	return Description{
		Type:        k.typeName(),
		UID:         displayID(k.uid.Load()),
		GID:         displayID(k.gid.Load()),
		Perm:        Perm(k.perm.Load()),
		Description: k.description(),
	}, nil
}

// SetTimeout sets a key to expire secs seconds from now, or never with 0
// (KEYCTL_SET_TIMEOUT).
func (c *Caller) SetTimeout(id Serial, secs uint32) error {
	r, err := c.lookupUserKey(id, lookupCreate|lookupPartial, SetAttr)
	if err == EACCES {
		if o, oerr := c.authOverride(id); oerr == nil {
			r, err = o, nil
		}
	}
	if err != nil {
		return wrap("keyctl_set_timeout", id, err)
	}
	defer r.put()
	c.s.setExpiry(r.key, secs)
	notify(r.key, NotifySetAttr, 0)
	return nil
}

func (s *Service) setExpiry(k *Key, secs uint32) {
	if secs == 0 {
		k.expiry.Store(0)
		return
	}
	k.expiry.Store(s.now() + int64(time.Duration(secs)*time.Second))
	s.keyDied(k)
}

// GetSecurity returns a key's security label (KEYCTL_GET_SECURITY): ukeys
// has no security module, so the label is empty.
func (c *Caller) GetSecurity(id Serial) (string, error) {
	r, err := c.lookupUserKey(id, lookupPartial, View)
	if err == EACCES {
		r, err = c.authOverride(id)
	}
	if err != nil {
		return "", wrap("keyctl_get_security", id, err)
	}
	r.put()
	return "", nil
}
