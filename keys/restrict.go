package keys

// restriction limits what may be linked into a keyring
// (KEYCTL_RESTRICT_KEYRING). The built-in types define no restriction
// schemes, so the only one available to callers is "reject everything";
// registered types may supply a check.
type restriction struct {
	check func(ring, k *Key) error
	// key is the key or keyring the check trusts, referenced for as long
	// as the restricted keyring lives (key_or_keyring:ID).
	key *Key
	// spec is the restriction as the caller wrote it, which a daemon
	// taking over parses again (Service.Export).
	spec string
}

var rejectAll = &restriction{check: func(*Key, *Key) error { return EPERM }}

// RestrictKeyring restricts the keyring id once and for all
// (KEYCTL_RESTRICT_KEYRING). With typ nil (and restriction nil) every
// future link is refused with EPERM. The "asymmetric" type offers the
// kernel's schemes (see asymmetricRestriction); the other built-in types
// none: naming one fails with ENOENT.
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
		if t != asymmetricType {
			return ENOENT // the type has no restriction schemes
		}
		if res, err = c.s.asymmetricRestriction(*spec); err != nil {
			return err
		}
		res.spec = *spec
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

// release drops the reference a restriction holds.
func (r *restriction) release() {
	if r != nil && r.key != nil {
		r.key.put()
	}
}

// restrictionCycle reports whether restricting ring by res would make a
// loop of keyrings each trusting the next (keyring_detect_restriction_
// cycle): res trusts a keyring whose chain of restrictions leads back to
// ring.
func restrictionCycle(ring *Key, res *restriction) bool {
	for k := res.key; k != nil && k.isKeyring(); {
		if k == ring {
			return true
		}
		r := k.restriction()
		if r == nil {
			return false
		}
		k = r.key
	}
	return false
}
