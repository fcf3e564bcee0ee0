package keys

// RequestKey finds a key of type typ and description desc in the caller's
// keyrings (request_key(2)). If there is none and callout is not nil, it
// constructs one through the upcall and waits for the helper's answer.
// With dest non-zero, the key is linked into that keyring.
func (c *Caller) RequestKey(typ, desc string, callout []byte, dest Serial) (Serial, error) {
	id, err := c.requestKey(typ, desc, callout, dest)
	return id, wrap("request_key", dest, err)
}

func (c *Caller) requestKey(typ, desc string, callout []byte, destID Serial) (Serial, error) {
	if err := checkTypeName(typ); err != nil {
		return 0, err
	}
	if len(desc) > MaxDescription || len(callout) > MaxCalloutInfo {
		return 0, EINVAL
	}
	var dest ref
	if destID != 0 {
		var err error
		if dest, err = c.lookupUserKey(destID, lookupCreate, Write); err != nil {
			return 0, err
		}
		defer dest.put()
	}
	t := c.s.lookupType(typ)
	if t == nil {
		return 0, ENOKEY
	}
	k, cn, err := c.findOrConstruct(t, desc, callout, dest)
	if err != nil {
		return 0, err
	}
	defer k.put()
	if cn != nil {
		<-cn.done
		if cn.err != nil {
			return 0, cn.err
		}
	}
	if err := c.waitConstructed(k); err != nil {
		return 0, err
	}
	if err := k.negativeErr(); err != nil {
		return 0, err
	}
	if err := k.validate(c.s.now()); err != nil {
		return 0, err
	}
	return k.serial, nil
}

func (c *Caller) searchFor(t *Type, desc string) (*Key, error) {
	sc := &search{cred: c.cr(), typ: t.Name, desc: desc, stateCheck: true, skipExpired: true,
		checkPerm: true, recurse: true, now: c.s.now()}
	if t.MatchPreparse != nil {
		var err error
		if sc.match, err = t.MatchPreparse(desc); err != nil {
			return nil, err
		}
	}
	sec := c.s.dom.Read()
	defer sec.End()
	k, err := c.searchProcess(sc)
	if err == nil && !k.tryGet() {
		return nil, errAgain
	}
	return k, err
}

// findOrConstruct is request_key_and_link: the returned key holds a
// reference. cn is set when this call started the construction.
func (c *Caller) findOrConstruct(t *Type, desc string, callout []byte, dest ref) (k *Key, cn *construction, err error) {
	k, err = c.searchFor(t, desc)
	if err == nil {
		if dest.key != nil {
			if !permitted(k, c.cr(), true, Link) {
				k.put()
				return nil, nil, EACCES
			}
			if err := c.s.linkInto(dest.key, k.get(), true); err != nil {
				k.put()
				k.put()
				return nil, nil, err
			}
		}
		return k, nil, nil
	}
	if err != errAgain {
		return nil, nil, err
	}
	if callout == nil {
		return nil, nil, ENOKEY
	}
	if t == keyringType {
		return nil, nil, EPERM
	}
	return c.construct(t, desc, callout, dest)
}

// SetReqKeyKeyring sets where request_key links keys it constructs when no
// destination is given (KEYCTL_SET_REQKEY_KEYRING) and returns the
// previous setting; [ReqKeyNoChange] only reads it.
func (c *Caller) SetReqKeyKeyring(n int) (int, error) {
	switch n {
	case ReqKeyNoChange:
		c.mu.Lock()
		defer c.mu.Unlock()
		return int(c.jit), nil
	case ReqKeyThread:
		if _, err := c.installThread(); err != nil {
			return 0, wrap("keyctl_set_reqkey_keyring", 0, err)
		}
	case ReqKeyProcess:
		if _, err := c.installProcess(); err != nil {
			return 0, wrap("keyctl_set_reqkey_keyring", 0, err)
		}
	case ReqKeyDefault, ReqKeySession, ReqKeyUser, ReqKeyUserSession, ReqKeyRequestor:
	default:
		return 0, wrap("keyctl_set_reqkey_keyring", 0, EINVAL)
	}
	// Swapped under one lock, so that concurrent callers each get the
	// setting they replaced.
	c.mu.Lock()
	old := c.jit
	c.jit = reqKeyDest(n)
	c.mu.Unlock()
	return int(old), nil
}

// reqKeyDest is a Caller's default request-key destination, one of the
// ReqKey constants other than ReqKeyNoChange.
type reqKeyDest int8

// Request-key default destinations (KEY_REQKEY_DEFL_*). They are untyped:
// [Caller.SetReqKeyKeyring] takes and returns them as the int of the wire
// protocol; a [Caller] keeps its setting as a reqKeyDest.
const (
	ReqKeyNoChange    = -1
	ReqKeyDefault     = 0
	ReqKeyThread      = 1
	ReqKeyProcess     = 2
	ReqKeySession     = 3
	ReqKeyUser        = 4
	ReqKeyUserSession = 5
	ReqKeyGroup       = 6
	ReqKeyRequestor   = 7
)
