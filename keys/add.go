package keys

import (
	"strings"
	"sync"
)

// defaultPerm is the mask the kernel gives keys that callers create.
func defaultPerm(t *Type) Perm {
	pos := View | Search | Link | SetAttr
	if t.Read != nil || t.ReadAs != nil || t == keyringType { // a keyring reads as its links
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
	r, t, err := c.addTarget(typ, desc, len(payload), ringID)
	if err != nil {
		return 0, err
	}
	defer r.put()
	ring := r.key
	// A type with Prepare makes its payload from the key it replaces, if
	// there is one (the kernel updates an existing key with the bytes as
	// they came), so it prepares only once that is known; the others
	// prepare first, as the kernel's preparse runs first.
	var prep *Payload
	charge := 0
	if t.Prepare == nil && t != keyringType {
		if prep, charge, err = t.preparseFor(c, payload); err != nil {
			return 0, err
		}
	}
	if desc == "" {
		// The kernel's key_create_or_update takes the description the
		// type's preparse proposed.
		if prep != nil {
			desc = t.ProposeDescription(prep)
		}
		// A proposed description is the payload's to choose (an X.509
		// subject of any length): bounded as a caller's, or the key
		// would be one that no state stream carries, and a hand-over
		// would lose every key with it.
		if desc == "" || len(desc) > MaxDescription {
			prep.release(nil)
			return 0, EINVAL
		}
	}
	if ring.has(flagRevoked | flagInvalidated | flagDead) {
		prep.release(nil)
		return 0, EKEYREVOKED
	}
	// The keyring's restriction judges the key proposed before anything
	// else is looked at, as the kernel's key_create_or_update runs it
	// before it looks for a key to update or charges a new one: an add
	// that would update a key already linked is refused as one that would
	// link a new key is. A restriction is set once and for all, so the
	// link below judges again (a signature check, for some) only if there
	// was none yet.
	res := ring.restriction()
	if res != nil {
		if err := res.Check(ring, proposedKey(t, desc, prep)); err != nil {
			prep.release(nil)
			return 0, err
		}
	}
	if t.Updatable {
		// From the search for a key to update to the link of a new one,
		// nobody else adds to this keyring: of two add_keys of one
		// description at once, the second updates the key the first
		// made (the kernel holds the keyring's lock as long), rather than
		// making a second that displaces the first, whose adder would be
		// left with a key the collector is about to reap. A key found is
		// waited for and updated outside it, as in the kernel.
		mu := c.s.addLock(ring)
		mu.Lock()
		locked := true
		unlock := func() {
			if locked {
				locked = false
				mu.Unlock()
			}
		}
		defer unlock()
		taken := false
		if id, done, err := c.updateExisting(r, t, desc, unlock, func(old *Payload) (*Payload, int, error) {
			taken = true
			if t.Prepare != nil {
				return t.prepareUpdate(c, desc, old, payload)
			}
			return prep, charge, nil
		}); done {
			if !taken {
				prep.release(nil) // refused before it was needed
			}
			return id, err
		}
	}
	if t.Prepare != nil {
		if prep, charge, err = t.Prepare(c, desc, nil, payload); err != nil {
			return 0, err
		}
	}
	k, err := c.s.alloc(keySpec{typ: t, desc: desc, uid: c.cr().UID, gid: c.cr().GID, perm: defaultPerm(t), quota: true})
	if err != nil {
		prep.release(nil)
		return 0, err
	}
	if err := c.s.instantiate(k, prep, charge); err != nil {
		prep.release(nil)
		k.put()
		return 0, err
	}
	if err := c.s.linkInto(ring, k, res == nil); err != nil {
		k.put()
		return 0, err
	}
	return k.serial, nil
}

// proposedKey stands for the key add_key would make, for a keyring's
// restriction to judge: its type and description, and its payload if it
// is made before the key (prep, nil for a type with Prepare). It is in no
// index, charged to nobody, and never published.
func proposedKey(t *Type, desc string, prep *Payload) *Key {
	k := newKey(desc, 0)
	k.typ.Store(t)
	if prep != nil && t != keyringType {
		k.storePayload(prep)
	}
	return k
}

// addLock is the lock that serialises add_key's find-or-create into
// ring: one of a fixed set, by the keyring's serial.
func (s *Service) addLock(ring *Key) *sync.Mutex {
	return &s.adding[uint32(ring.serial)%uint32(len(s.adding))]
}

// AddKeyCheck returns the error that [Caller.AddKey] would return for a
// payload of plen bytes, as far as that error does not depend on the
// payload's bytes: the description, the keyring and the caller's right to
// write to it, the type, and a length the type refuses whatever the bytes
// (its MaxSize). It returns nil where AddKey would go on to look at the
// bytes. A client holding a large payload asks first, so that a payload the
// daemon would refuse is never sent (the kernel, which receives the payload
// by pointer, copies it before it looks).
func (c *Caller) AddKeyCheck(typ, desc string, plen int, ring Serial) error {
	r, _, err := c.addTarget(typ, desc, plen, ring)
	if err != nil {
		return wrap("add_key", ring, err)
	}
	r.put()
	return nil
}

// addTarget is add_key's checks up to the type's look at the payload, in
// the kernel's order, for a payload of plen bytes: it returns the keyring
// to add to (which the caller puts) and the type.
func (c *Caller) addTarget(typ, desc string, plen int, ringID Serial) (ref, *Type, error) {
	if plen > MaxPayload {
		return ref{}, nil, EINVAL
	}
	if err := checkTypeName(typ); err != nil {
		return ref{}, nil, err
	}
	if err := checkDesc(desc); err != nil {
		return ref{}, nil, err
	}
	if desc != "" && desc[0] == '.' && strings.HasPrefix(typ, "keyring") {
		return ref{}, nil, EPERM
	}
	r, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return ref{}, nil, err
	}
	fail := func(err error) (ref, *Type, error) {
		r.put()
		return ref{}, nil, err
	}
	t := c.s.lookupType(typ)
	switch {
	case t == nil:
		return fail(ENODEV)
	case desc == "" && t.ProposeDescription == nil:
		return fail(EINVAL)
	case !r.key.isKeyring():
		return fail(ENOTDIR)
	case t == keyringType && plen != 0:
		return fail(EINVAL) // a keyring's payload is its links
	case t != keyringType && (!t.takesPayloads() || t.MaxSize > 0 && plen > t.MaxSize):
		return fail(EINVAL)
	}
	return r, t, nil
}

// updateExisting is add_key's update path: done reports whether it
// handled the call. found runs once a key to update is found, before it
// is waited for. prepare makes the new payload from the one it replaces;
// a payload it made and did not use is wiped.
func (c *Caller) updateExisting(r ref, t *Type, desc string, found func(), prepare func(old *Payload) (*Payload, int, error)) (Serial, bool, error) {
	sec := c.s.dom.Read()
	l, ok := r.key.loadRing().find(t.Name, desc)
	if !ok || l.key.has(flagRevoked|flagInvalidated) || !l.key.tryGet() {
		sec.End()
		return 0, false, nil
	}
	sec.End()
	found()
	k := l.key
	defer k.put()
	if err := c.waitConstructed(k); err != nil {
		return 0, true, err
	}
	if !permitted(k, c.cr(), r.possessed, Write) {
		return 0, true, EACCES
	}
	// The payload replaced is read in a section, as a reader would: an
	// update that retires it meanwhile wipes it only after the section.
	sec = c.s.dom.Read()
	prep, charge, err := prepare(k.loadPayload())
	sec.End()
	if err != nil {
		return 0, true, err
	}
	if err := c.s.update(k, prep, charge); err != nil {
		prep.release(nil)
		return 0, true, err
	}
	return k.serial, true, nil
}
