package keys

// A few calls cost far more CPU than the rest: those that parse the
// payload of a costly type ([Type.Costly]: package keys/asymmetric's, an
// X.509 certificate, whose self-signature is checked, or a PKCS#8 key)
// and those that link a key into a keyring restricted by a check (a
// signature's). The kernel runs them in the caller's
// own task, charged to its cgroup and nice level; a daemon that serves
// every caller must bound them itself, and so must tell them apart
// before it runs them, cheaply, without creating anything or checking
// any permission (the call itself does that). These answer that.

// CostlyType reports whether adding a key of type typ parses its payload
// at a cost far above the rest ([Type.Costly]).
func (s *Service) CostlyType(typ string) bool {
	t := s.lookupType(typ)
	return t != nil && t.Costly
}

// CostlyKey reports whether the key id names (a serial, as given to
// instantiate or update) is of a costly type: instantiating it parses
// its payload.
func (c *Caller) CostlyKey(id Serial) bool {
	if id <= 0 {
		return false
	}
	sec := c.s.dom.Read()
	defer sec.End()
	k := c.s.lookup(id)
	if k == nil {
		return false
	}
	t := k.typ.Load()
	return t != nil && t.Costly
}

// CostlyRing reports whether linking into the keyring id names (a serial
// or a special id of the caller's, resolved without making any keyring)
// runs a check of the key linked: the keyring is restricted, other than
// to refuse everything.
func (c *Caller) CostlyRing(id Serial) bool {
	var k *Key
	switch {
	case id == ThreadKeyring:
		k = c.special(&c.thread)
	case id == ProcessKeyring:
		k = c.special(&c.process)
	case id == SessionKeyring:
		k = c.special(&c.session)
		if k == nil {
			return c.costlyUserRing(true)
		}
	case id == UserKeyring || id == UserSessionKeyring:
		return c.costlyUserRing(id == UserSessionKeyring)
	case id == RequestorKeyring:
		if a := c.assumed(); a != nil && a.authRec() != nil && a.authRec().dest != nil {
			return costlyRestriction(a.authRec().dest)
		}
		return false
	case id <= 0:
		return false
	default:
		sec := c.s.dom.Read()
		defer sec.End()
		if k := c.s.lookup(id); k != nil {
			return costlyRestriction(k)
		}
		return false
	}
	if k == nil {
		return false
	}
	defer k.put()
	return costlyRestriction(k)
}

// costlyUserRing is CostlyRing of the caller's user (or user-session)
// keyring, if it exists.
func (c *Caller) costlyUserRing(session bool) bool {
	sec := c.s.dom.Read()
	defer sec.End()
	k := c.s.existingUserKeyring(c.cr().UID, session)
	return k != nil && costlyRestriction(k)
}

func costlyRestriction(ring *Key) bool {
	r := ring.restriction()
	return r != nil && r != rejectAll
}
