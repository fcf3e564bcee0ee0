package keys

// Restriction is what a key type's [Type.LookupRestriction] makes of a
// restriction string (KEYCTL_RESTRICT_KEYRING): the check a restricted
// keyring runs on every key linked into it from then on. It is exported
// so that a type in a package of its own (keys/asymmetric) can offer
// restriction schemes, as the kernel's key_type.lookup_restriction does.
type Restriction struct {
	// Check judges k, about to be linked into ring (or proposed to
	// add_key for it): nil lets it in, an error (EPERM, ENOKEY,
	// EKEYREJECTED…) is the link's. It runs with ring's lock held and in
	// no read section.
	Check func(ring, k *Key) error
	// Trusted, if not nil, is the key or keyring the check trusts
	// (key_or_keyring:ID), with a reference LookupRestriction took and
	// the restricted keyring keeps for as long as it lives; a keyring
	// restricted by a chain of such keyrings leading back to itself is
	// refused (EDEADLK).
	Trusted *Key
}

// restriction is a keyring's Restriction with what a daemon taking
// over needs to make it again (Service.Export): the type that made it
// and the string it was made of.
type restriction struct {
	Restriction
	typ, spec string
}

// rejectAll is the restriction of no type: every link is refused.
var rejectAll = &restriction{Restriction: Restriction{Check: func(*Key, *Key) error { return EPERM }}}

// RestrictKeyring restricts the keyring id once and for all
// (KEYCTL_RESTRICT_KEYRING). With typ nil (and restriction nil) every
// future link is refused with [EPERM]. A type offers schemes of its own
// through [Type.LookupRestriction] (the "asymmetric" type of package
// keys/asymmetric the kernel's); naming a type without fails with [ENOENT].
func (c *Caller) RestrictKeyring(id Serial, typ, restrictionSpec *string) error {
	return wrap("keyctl_restrict_keyring", id, c.restrictKeyring(id, typ, restrictionSpec))
}

func (c *Caller) restrictKeyring(id Serial, typ, spec *string) error {
	r, err := c.lookupUserKey(id, 0, SetAttr)
	if err != nil {
		return err
	}
	defer r.put()
	if (typ == nil) != (spec == nil) {
		return EINVAL
	}
	var res *restriction
	if typ != nil {
		if err := checkTypeName(*typ); err != nil {
			return err
		}
		if len(*spec) > MaxCalloutInfo {
			return EINVAL
		}
	}
	ring := r.key
	if !ring.isKeyring() {
		return ENOTDIR
	}
	if typ != nil {
		t := c.s.lookupType(*typ)
		if t == nil {
			return ENOKEY
		}
		if res, err = c.s.lookupRestriction(t, *spec); err != nil {
			return err
		}
	} else {
		res = rejectAll
	}
	// One restriction at a time, service-wide, as the kernel holds
	// keyring_serialise_restrict_sem: two keyrings restricted at once by
	// each other would each find the other unrestricted, and make a loop
	// that restrictionCycle would then walk for ever.
	c.s.restrictMu.Lock()
	defer c.s.restrictMu.Unlock()
	ring.mu.Lock()
	if ring.restriction() != nil {
		ring.mu.Unlock()
		res.release()
		return EEXIST
	}
	if restrictionCycle(ring, res) {
		ring.mu.Unlock()
		res.release()
		return EDEADLK
	}
	ring.extra().restrict.Store(res)
	ring.mu.Unlock()
	notify(ring, NotifySetAttr, 0)
	return nil
}

// lookupRestriction makes the restriction spec of type t: ENOENT if
// the type has no restriction schemes, as the kernel's
// keyctl_restrict_keyring answers.
func (s *Service) lookupRestriction(t *Type, spec string) (*restriction, error) {
	if t.LookupRestriction == nil {
		return nil, ENOENT
	}
	r, err := t.LookupRestriction(s, spec)
	if err != nil {
		return nil, err
	}
	return &restriction{Restriction: *r, typ: t.Name, spec: spec}, nil
}

// release drops the reference a restriction holds.
func (r *restriction) release() {
	if r != nil && r.Trusted != nil {
		r.Trusted.put()
	}
}

// restrictionCycle reports whether restricting ring by res would make a
// loop of keyrings each trusting the next (keyring_detect_restriction_
// cycle): res trusts a keyring whose chain of restrictions leads back to
// ring.
func restrictionCycle(ring *Key, res *restriction) bool {
	for k := res.Trusted; k != nil && k.isKeyring(); {
		if k == ring {
			return true
		}
		r := k.restriction()
		if r == nil {
			return false
		}
		k = r.Trusted
	}
	return false
}
