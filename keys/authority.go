package keys

import "fmt"

// Authorized reports whether the upcall's authorisation is still in
// force. Like the kernel's request_key_auth key, it is used up once the
// helper instantiates, negates or rejects the key (invalidated), and
// revoked when the upcall times out or ends; whatever acts with the
// helper's authority loses it then.
func (u *Upcall) Authorized() bool {
	a := u.auth
	return a != nil && a.validate(u.s.now()) == nil
}

// PossessesNonKeyring reports whether id names a key that is not a
// keyring and that the caller possesses: one found by searching its own
// keyrings or, for a caller that assumed a request-key authority, its
// requestor's, with the requestor's credentials. That is what a
// request-key helper may read on its requestor's behalf (keyutils'
// %{type:description} macros) without being able to list the requestor's
// keyrings.
func (c *Caller) PossessesNonKeyring(id Serial) bool {
	if id <= 0 {
		return false
	}
	sec := c.s.dom.Read()
	defer sec.End()
	k := c.s.lookup(id)
	if k == nil || k.usage.Load() <= 0 || k.isKeyring() {
		return false
	}
	return c.possessesIn(k)
}

// authRecord is what an authorisation key carries.
type authRecord struct {
	target    *Key
	dest      *Key
	callout   []byte
	requestor *Caller
	pid       int
}

// finishAuth revokes an authorisation key and drops its references.
func (s *Service) finishAuth(auth *Key) {
	s.revoke(auth)
	auth.mu.Lock()
	rec := auth.authRec()
	auth.mu.Unlock()
	if rec != nil {
		rec.target.put()
		rec.dest.put()
	}
	auth.put()
}

// authFor returns the caller's assumed authorisation if it is for key id.
// Like the kernel, it does not care whether that authorisation was used
// up: instantiating then fails with EBUSY.
func (c *Caller) authFor(id Serial) (*Key, error) {
	a := c.assumed()
	if a == nil || a.authRec() == nil || a.authRec().target.serial != id {
		return nil, EPERM
	}
	return a, nil
}

// instantiationAuthKey finds the authorisation to construct key id in the
// caller's keyrings (key_get_instantiation_authkey). The result holds a
// reference.
func (c *Caller) instantiationAuthKey(id Serial) (*Key, error) {
	sc := &search{cred: c.cr(), typ: authType.Name, desc: fmt.Sprintf("%x", uint32(id)), stateCheck: true,
		checkPerm: true, recurse: true, now: c.s.now()}
	sec := c.s.dom.Read()
	k, err := c.searchProcess(sc)
	if err == nil && !k.tryGet() {
		err = errAgain
	}
	sec.End()
	if err == errAgain {
		return nil, ENOKEY
	}
	if err != nil {
		return nil, err
	}
	if k.has(flagRevoked) {
		k.put()
		return nil, EKEYREVOKED
	}
	return k, nil
}

// authOverride lets a caller that holds the authorisation for key id in
// its keyrings (a request-key helper, whether or not it assumed it) reach
// the key without the usual permission: describe, set timeout, get
// security. As in the kernel, the key may be uninstantiated or negative
// but must be valid. It returns the lookup error of the authorisation
// (ENOKEY when there is none) or of the key.
func (c *Caller) authOverride(id Serial) (ref, error) {
	a, err := c.instantiationAuthKey(id)
	if err != nil {
		return ref{}, err
	}
	a.put()
	r, err := c.resolve(id, 0)
	if err != nil {
		return ref{}, err
	}
	if err := r.key.validate(c.s.now()); err != nil {
		r.put()
		return ref{}, err
	}
	return r, nil
}

// dropAuthority forgets a used authorisation (keyctl_change_reqkey_auth
// with NULL).
func (c *Caller) dropAuthority(auth *Key) {
	c.mu.Lock()
	if c.auth.Load() == auth {
		c.auth.Store(nil)
		c.mu.Unlock()
		auth.put()
		return
	}
	c.mu.Unlock()
}

// AssumeAuthority makes the caller act with the authority to construct
// key id (KEYCTL_ASSUME_AUTHORITY), which it must find as a
// .request_key_auth key in its keyrings; id 0 drops the authority.
func (c *Caller) AssumeAuthority(id Serial) (Serial, error) {
	s, err := c.assumeAuthority(id)
	return s, wrap("keyctl_assume_authority", id, err)
}

func (c *Caller) assumeAuthority(id Serial) (Serial, error) {
	if id < 0 {
		return 0, EINVAL
	}
	if id == 0 {
		c.mu.Lock()
		old := c.auth.Swap(nil)
		c.mu.Unlock()
		old.put()
		return 0, nil
	}
	k, err := c.instantiationAuthKey(id)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	old := c.auth.Swap(k)
	c.mu.Unlock()
	old.put()
	return k.serial, nil
}
