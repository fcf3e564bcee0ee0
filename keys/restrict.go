package keys

// restriction limits what may be linked into a keyring
// (KEYCTL_RESTRICT_KEYRING). The built-in types define no restriction
// schemes, so the only one available to callers is "reject everything";
// registered types may supply a check.
type restriction struct {
	check func(ring, k *Key) error
}

var rejectAll = &restriction{check: func(*Key, *Key) error { return EPERM }}

// RestrictKeyring restricts the keyring id once and for all
// (KEYCTL_RESTRICT_KEYRING). With typ nil (and restriction nil) every
// future link is refused with EPERM. The built-in types offer no
// restriction schemes: naming one fails with ENOENT.
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
		return ENOENT // no built-in type has restriction schemes
	}
	res = rejectAll
	ring.mu.Lock()
	if ring.restriction() != nil {
		ring.mu.Unlock()
		return EEXIST
	}
	ring.extra().restrict = res
	ring.mu.Unlock()
	notify(ring, NotifySetAttr, 0)
	return nil
}
