package keys

import (
	"fmt"
	"strings"
	"time"
)

// wrap attaches the operation (and key) to an errno so that errors say
// where they came from while errors.Is still matches the errno.
func wrap(op string, id Serial, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(Errno); ok {
		return &opError{op: op, id: id, err: e}
	}
	return err
}

// defaultPerm is the mask the kernel gives keys that callers create.
func defaultPerm(t *Type) Perm {
	pos := View | Search | Link | SetAttr
	if t.Read != nil || t == keyringType { // a keyring reads as its links
		pos |= Read
	}
	if t == keyringType || t.Updatable {
		pos |= Write
	}
	return pos<<PossessorShift | View<<UserShift
}

func checkDesc(desc string) error {
	if len(desc) > MaxDescription {
		return EINVAL
	}
	return nil
}

// AddKey creates a key of type typ with the given description and payload
// and links it into the keyring ring, or, if ring already holds a key of
// that type and description and the type supports it, updates that key.
// It returns the serial of the created or updated key (add_key(2)).
func (c *Caller) AddKey(typ, desc string, payload []byte, ring Serial) (Serial, error) {
	id, err := c.addKey(typ, desc, payload, ring)
	return id, wrap("add_key", ring, err)
}

func (c *Caller) addKey(typ, desc string, payload []byte, ringID Serial) (Serial, error) {
	if len(payload) > MaxPayload {
		return 0, EINVAL
	}
	if err := checkTypeName(typ); err != nil {
		return 0, err
	}
	if err := checkDesc(desc); err != nil {
		return 0, err
	}
	if desc != "" && desc[0] == '.' && strings.HasPrefix(typ, "keyring") {
		return 0, EPERM
	}
	r, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return 0, err
	}
	defer r.put()
	t := c.s.lookupType(typ)
	if t == nil {
		return 0, ENODEV
	}
	if desc == "" {
		return 0, EINVAL
	}
	ring := r.key
	if !ring.isKeyring() {
		return 0, ENOTDIR
	}
	var prep *Payload
	charge := 0
	if t == keyringType {
		if len(payload) != 0 {
			return 0, EINVAL
		}
	} else {
		if t.Preparse == nil {
			return 0, EINVAL
		}
		if prep, charge, err = t.Preparse(payload); err != nil {
			return 0, err
		}
	}
	if ring.has(flagRevoked | flagInvalidated | flagDead) {
		prep.wipe()
		return 0, EKEYREVOKED
	}
	if t.Updatable {
		if id, done, err := c.updateExisting(r, t, desc, prep, charge); done {
			return id, err
		}
	}
	k, err := c.s.alloc(keySpec{typ: t, desc: desc, uid: c.cred.UID, gid: c.cred.GID, perm: defaultPerm(t), quota: true})
	if err != nil {
		prep.wipe()
		return 0, err
	}
	if err := c.s.instantiate(k, prep, charge); err != nil {
		prep.wipe()
		k.put()
		return 0, err
	}
	if err := c.s.linkInto(ring, k, true); err != nil {
		k.put()
		return 0, err
	}
	return k.serial, nil
}

// updateExisting is add_key's update path: done reports whether it
// handled the call.
func (c *Caller) updateExisting(r ref, t *Type, desc string, prep *Payload, charge int) (Serial, bool, error) {
	sec := c.s.dom.Read()
	l, ok := r.key.ring.Load().find(t.Name, desc)
	if !ok || l.key.has(flagRevoked|flagInvalidated) || !l.key.tryGet() {
		sec.End()
		return 0, false, nil
	}
	sec.End()
	k := l.key
	defer k.put()
	if err := c.waitConstructed(k); err != nil {
		prep.wipe()
		return 0, true, err
	}
	if !permitted(k, &c.cred, r.possessed, Write) {
		prep.wipe()
		return 0, true, EACCES
	}
	if err := c.s.update(k, prep, charge); err != nil {
		prep.wipe()
		return 0, true, err
	}
	return k.serial, true, nil
}

// instantiate gives an allocated key its first payload.
func (s *Service) instantiate(k *Key, p *Payload, charge int) error {
	k.mu.Lock()
	if k.state.Load() != stateUninstantiated {
		k.mu.Unlock()
		return EBUSY
	}
	if charge > 0 && k.has(flagInQuota) {
		if err := s.adjust(k.quota, charge); err != nil {
			k.mu.Unlock()
			return err
		}
		k.quotalen += charge
	}
	if p != nil {
		p.charge = charge
		k.payload.Store(p)
	}
	s.markInstantiated(k)
	k.mu.Unlock()
	s.constructionDone(k)
	notify(k, NotifyInstantiated, 0)
	return nil
}

// update replaces a key's payload; the old one is wiped after a grace
// period, once no reader can hold it.
func (s *Service) update(k *Key, p *Payload, charge int) error {
	k.mu.Lock()
	if k.has(flagRevoked | flagInvalidated | flagDead) {
		k.mu.Unlock()
		return EKEYREVOKED
	}
	old := k.payload.Load()
	delta := charge
	if old != nil {
		delta -= old.charge
	}
	p.charge = charge
	if k.has(flagInQuota) {
		if err := s.adjust(k.quota, delta); err != nil {
			k.mu.Unlock()
			return err
		}
		k.quotalen += delta
	}
	k.payload.Store(p)
	wasNegative := k.state.Load() != statePositive
	k.state.Store(statePositive)
	if wasNegative {
		k.quota.mu.Lock()
		if k.state.Load() == stateUninstantiated {
			k.quota.nikeys++
		}
		k.quota.mu.Unlock()
	}
	// Updating a user or logon key clears its timeout, as in the kernel.
	k.expiry.Store(0)
	k.mu.Unlock()
	s.retire(k, old)
	notify(k, NotifyUpdated, 0)
	return nil
}

// retire wipes and releases a payload after a grace period.
func (s *Service) retire(k *Key, p *Payload) {
	if p == nil {
		return
	}
	s.retirePayload(p, k.typ.Load().Destroy)
}

// retirePayload wipes p and releases it with destroy (if any) after a grace
// period, or at once if the service is closing.
func (s *Service) retirePayload(p *Payload, destroy func(*Payload)) {
	release := func() {
		p.wipe()
		if destroy != nil {
			destroy(p)
		}
	}
	s.deferUnlessClosed(func() { s.dom.Call(release) }, release)
}

// Update replaces a key's payload (KEYCTL_UPDATE).
func (c *Caller) Update(id Serial, payload []byte) error {
	return wrap("keyctl_update", id, c.updateKey(id, payload))
}

func (c *Caller) updateKey(id Serial, payload []byte) error {
	if len(payload) > MaxUpdatePayload {
		return EINVAL
	}
	r, err := c.lookupUserKey(id, 0, Write)
	if err != nil {
		return err
	}
	defer r.put()
	t := r.key.typ.Load()
	if !t.Updatable || t.Preparse == nil {
		return EOPNOTSUPP
	}
	p, charge, err := t.Preparse(payload)
	if err != nil {
		return err
	}
	if err := c.s.update(r.key, p, charge); err != nil {
		p.wipe()
		return err
	}
	return nil
}

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
	old := k.payload.Swap(nil)
	if old != nil && k.has(flagInQuota) {
		s.adjust(k.quota, -old.charge)
		k.quotalen -= old.charge
	}
	var links []link
	if k.isKeyring() {
		if snap := k.ring.Swap(&ringSnap{}); snap != nil {
			links = snap.links()
			s.chargeLink(k, -linkCost*snap.n)
			for _, l := range links {
				l.key.removeParent(k)
			}
		}
	}
	k.mu.Unlock()
	s.retire(k, old)
	for _, l := range links {
		l.key.put()
	}
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
// unchanged. Only a privileged caller may give a key away or to a group
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
	if uid != -1 && uint32(uid) != k.uid.Load() && !c.cred.privileged() {
		return EACCES
	}
	if gid != -1 && uint32(gid) != k.gid.Load() && !c.cred.inGroup(uint32(gid)) && !c.cred.privileged() {
		return EACCES
	}
	if uid != -1 && uint32(uid) != k.uid.Load() {
		nu := c.s.quotaFor(uint32(uid))
		if k.has(flagInQuota) {
			if err := c.s.charge(nu, k.quotalen, false); err != nil {
				c.s.quotaPut(nu)
				return err
			}
			c.s.uncharge(k.quota, k.quotalen)
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
// or a privileged caller may.
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
	if k.uid.Load() != c.cred.UID && !c.cred.privileged() {
		return wrap("keyctl_setperm", id, EACCES)
	}
	k.perm.Store(uint32(perm))
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
// View permission.
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
		Description: k.desc,
	}, nil
}

// Clear removes every link from a keyring (KEYCTL_CLEAR).
func (c *Caller) Clear(ringID Serial) error {
	r, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return wrap("keyctl_clear", ringID, err)
	}
	defer r.put()
	if !r.key.isKeyring() {
		return wrap("keyctl_clear", ringID, ENOTDIR)
	}
	c.s.clearRing(r.key)
	notify(r.key, NotifyCleared, 0)
	return nil
}

// Link links a key into a keyring (KEYCTL_LINK), replacing a link to a key
// of the same type and description.
func (c *Caller) Link(id, ringID Serial) error {
	return wrap("keyctl_link", id, c.link(id, ringID))
}

func (c *Caller) link(id, ringID Serial) error {
	ring, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return err
	}
	defer ring.put()
	r, err := c.lookupUserKey(id, lookupCreate, Link)
	if err != nil {
		return err
	}
	if err := c.s.linkInto(ring.key, r.key, true); err != nil {
		r.put()
		return err
	}
	return nil
}

// Unlink removes a key's link from a keyring (KEYCTL_UNLINK). Only Write
// on the keyring is needed, not any permission on the key.
func (c *Caller) Unlink(id, ringID Serial) error {
	return wrap("keyctl_unlink", id, c.unlink(id, ringID))
}

func (c *Caller) unlink(id, ringID Serial) error {
	ring, err := c.lookupUserKey(ringID, 0, Write)
	if err != nil {
		return err
	}
	defer ring.put()
	r, err := c.lookupUserKey(id, lookupPartial, needUnlink)
	if err != nil {
		return err
	}
	defer r.put()
	return c.s.unlinkFrom(ring.key, r.key)
}

// Search looks for a key of type typ and description desc in the tree
// under the keyring ringID (KEYCTL_SEARCH), depth first, and links what it
// finds into dest unless dest is 0.
func (c *Caller) Search(ringID Serial, typ, desc string, dest Serial) (Serial, error) {
	id, err := c.searchKey(ringID, typ, desc, dest)
	return id, wrap("keyctl_search", ringID, err)
}

func (c *Caller) searchKey(ringID Serial, typ, desc string, destID Serial) (Serial, error) {
	if err := checkTypeName(typ); err != nil {
		return 0, err
	}
	if err := checkDesc(desc); err != nil {
		return 0, err
	}
	ring, err := c.lookupUserKey(ringID, 0, Search)
	if err != nil {
		return 0, err
	}
	defer ring.put()
	var dest ref
	if destID != 0 {
		if dest, err = c.lookupUserKey(destID, lookupCreate, Write); err != nil {
			return 0, err
		}
		defer dest.put()
	}
	if c.s.lookupType(typ) == nil {
		return 0, ENOKEY
	}
	if !ring.key.isKeyring() {
		return 0, ENOTDIR
	}
	sc := &search{cred: &c.cred, typ: typ, desc: desc, stateCheck: true, checkPerm: true, recurse: true, now: c.s.now()}
	sec := c.s.dom.Read()
	k, err := sc.tree(ring.key, ring.possessed)
	if err == nil && !k.tryGet() {
		err = ENOKEY
	}
	sec.End()
	if err == errAgain {
		return 0, ENOKEY
	}
	if err != nil {
		return 0, err
	}
	if dest.key != nil {
		if !permitted(k, &c.cred, ring.possessed, Link) {
			k.put()
			return 0, EACCES
		}
		if err := c.s.linkInto(dest.key, k.get(), true); err != nil {
			k.put()
			k.put()
			return 0, err
		}
	}
	k.put()
	return k.serial, nil
}

// Read returns a key's payload (KEYCTL_READ); for a keyring, the serials
// of its links in listing order. Any failure to find the key reads as
// ENOKEY, as in the kernel.
func (c *Caller) Read(id Serial) ([]byte, error) {
	b, err := c.read(id)
	return b, wrap("keyctl_read", id, err)
}

// ReadInto reads a key's payload into buf as keyctl_read(3) does on a
// current kernel: it returns the payload's length, and copies the payload
// only when buf can hold all of it (so a short or nil buf asks for the
// size). It allocates nothing on the common path.
func (c *Caller) ReadInto(id Serial, buf []byte) (int, error) {
	n, ok, err := c.readFast(id, buf, nil)
	if !ok {
		var out []byte
		if out, err = c.read(id); err == nil {
			n = len(out)
			if n <= len(buf) {
				copy(buf, out)
			}
		}
	}
	return n, wrap("keyctl_read", id, err)
}

func (c *Caller) read(id Serial) ([]byte, error) {
	var fast []byte
	if _, ok, err := c.readFast(id, nil, &fast); ok {
		return fast, err
	}
	r, err := c.lookupUserKey(id, 0, needDefer)
	if err != nil {
		return nil, ENOKEY // the kernel reports every lookup failure so
	}
	defer r.put()
	k := r.key
	if err := k.negativeErr(); err != nil {
		return nil, err
	}
	if !permitted(k, &c.cred, r.possessed, Read) && !r.possessed {
		return nil, EACCES
	}
	t := k.typ.Load()
	if k.isKeyring() {
		if err := k.validate(c.s.now()); err != nil {
			return nil, err
		}
		sec := c.s.dom.Read()
		links := k.ring.Load().links()
		sec.End()
		out := make([]byte, 0, 4*len(links))
		for _, l := range links {
			v := uint32(l.key.serial)
			out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		return out, nil
	}
	if t == authType {
		// A used or revoked authorisation reads as the kernel's does.
		if err := k.validate(c.s.now()); err != nil {
			return nil, err
		}
		if k.auth == nil {
			return nil, ENOKEY
		}
		return append([]byte(nil), k.auth.callout...), nil
	}
	if t.Read == nil {
		return nil, EOPNOTSUPP
	}
	if err := k.validate(c.s.now()); err != nil {
		return nil, err
	}
	sec := c.s.dom.Read()
	p := k.payload.Load()
	if p == nil {
		sec.End()
		return nil, EKEYREVOKED
	}
	data, err := t.Read(p)
	var out []byte
	if err == nil {
		out = append([]byte(nil), data...) // copied before the section ends
	}
	sec.End()
	return out, err
}

// readFast serves the common read, a positive serial naming a key of a
// readable type that is not under construction, in one rcu read section
// and without taking a reference: the section keeps the key from being
// destroyed and its payload from being wiped until it ends. ok is false
// for everything else (special ids, keyrings, authorisations, keys being
// constructed), which read serves the general way. The checks and their
// order are read's: lookup, negative state, permission, validity.
//
// The payload is copied before the section ends: into a new slice stored
// in *out when out is not nil, otherwise into dst if it fits. n is the
// payload's length.
func (c *Caller) readFast(id Serial, dst []byte, out *[]byte) (n int, ok bool, err error) {
	if id <= 0 {
		return 0, false, nil
	}
	s := c.s
	sec := s.dom.Read()
	defer sec.End()
	k := s.lookup(id)
	if k == nil || k.usage.Load() <= 0 {
		return 0, true, ENOKEY
	}
	t := k.typ.Load()
	if t == keyringType || t == authType || t.Read == nil || k.underConstruction() {
		return 0, false, nil
	}
	possessed := c.possessesIn(k)
	now := s.now()
	if k.lastUsed.Load() != now {
		k.lastUsed.Store(now)
	}
	if err := k.negativeErr(); err != nil {
		return 0, true, err
	}
	if !possessed && !permitted(k, &c.cred, false, Read) {
		return 0, true, EACCES
	}
	if err := k.validate(now); err != nil {
		return 0, true, err
	}
	p := k.payload.Load()
	if p == nil {
		return 0, true, EKEYREVOKED
	}
	data, err := t.Read(p)
	if err != nil {
		return 0, true, err
	}
	switch {
	case out != nil:
		*out = make([]byte, len(data))
		copy(*out, data)
	case len(data) <= len(dst):
		copy(dst, data)
	}
	return len(data), true, nil
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

// GetKeyringID returns the serial of the key an id names
// (KEYCTL_GET_KEYRING_ID), creating a special keyring if create is set.
func (c *Caller) GetKeyringID(id Serial, create bool) (Serial, error) {
	flags := 0
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

// Capability bits of KEYCTL_CAPABILITIES.
const (
	CapCapabilities   = 0x01
	CapPersistent     = 0x02
	CapDH             = 0x04
	CapPublicKey      = 0x08
	CapBigKey         = 0x10
	CapInvalidate     = 0x20
	CapRestrict       = 0x40
	CapMove           = 0x80
	Cap2NSKeyringName = 0x01
	Cap2NSKeyTag      = 0x02
	Cap2Notifications = 0x04
)

// Capabilities reports what the service supports (KEYCTL_CAPABILITIES).
func (c *Caller) Capabilities() []byte {
	return []byte{
		CapCapabilities | CapPersistent | CapDH | CapBigKey | CapInvalidate | CapRestrict | CapMove,
		Cap2Notifications,
	}
}

// WatchKey adds (watchID 0..255) or removes (watchID -1) a watch of q on a
// key (KEYCTL_WATCH_KEY).
func (c *Caller) WatchKey(id Serial, q *WatchQueue, watchID int) error {
	if watchID < -1 || watchID > 255 || q == nil {
		return wrap("keyctl_watch_key", id, EINVAL)
	}
	r, err := c.lookupUserKey(id, lookupCreate, View)
	if err != nil {
		return wrap("keyctl_watch_key", id, err)
	}
	defer r.put()
	if watchID == -1 {
		return wrap("keyctl_watch_key", id, dropWatch(r.key, q))
	}
	return wrap("keyctl_watch_key", id, addWatch(r.key, q, uint8(watchID)))
}
