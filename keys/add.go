package keys

import "strings"

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
	k, err := c.s.alloc(keySpec{typ: t, desc: desc, uid: c.cr().UID, gid: c.cr().GID, perm: defaultPerm(t), quota: true})
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
	if !permitted(k, c.cr(), r.possessed, Write) {
		prep.wipe()
		return 0, true, EACCES
	}
	if err := c.s.update(k, prep, charge); err != nil {
		prep.wipe()
		return 0, true, err
	}
	return k.serial, true, nil
}
