package keys

import (
	"context"
	"fmt"
	"time"
)

// NegativeTimeout is how long a key whose construction failed stays
// negative (the kernel's key_negative_timeout).
const NegativeTimeout = 60 * time.Second

// Upcall is one construction request handed to the helper: the kernel's
// call to /sbin/request-key.
type Upcall struct {
	// Op is "create".
	Op string
	// Key is the key to construct; AuthKey the authorisation that lets the
	// helper instantiate, negate or reject it.
	Key, AuthKey Serial
	// Type and Description of the key to construct.
	Type, Description string
	// CalloutInfo is the request's callout information.
	CalloutInfo []byte
	// UID and GID are the requestor's.
	UID, GID uint32
	// Thread, Process and Session are the requestor's keyrings (0 if it has
	// none; Session falls back to its user-session keyring).
	Thread, Process, Session Serial
	// Helper is the caller the helper acts as: the requestor's credentials,
	// with a session keyring (_req.N) holding the authorisation key. The
	// service releases it when the upcall returns.
	Helper *Caller
}

// Args returns the helper's argument vector after the program name, in
// the kernel's convention: create <key> <uid> <gid> <thread> <process>
// <session>.
func (u *Upcall) Args() []string {
	return []string{u.Op, fmt.Sprint(u.Key), fmt.Sprint(u.UID), fmt.Sprint(u.GID),
		fmt.Sprint(u.Thread), fmt.Sprint(u.Process), fmt.Sprint(u.Session)}
}

// Upcaller runs construction helpers. Upcall returns when the helper is
// done; if the key is still uninstantiated then, it is negated.
type Upcaller interface {
	Upcall(ctx context.Context, u *Upcall) error
}

// UpcallFunc adapts a function to Upcaller.
type UpcallFunc func(ctx context.Context, u *Upcall) error

// Upcall calls f.
func (f UpcallFunc) Upcall(ctx context.Context, u *Upcall) error { return f(ctx, u) }

// authRecord is what an authorisation key carries.
type authRecord struct {
	target    *Key
	dest      *Key
	callout   []byte
	requestor *Caller
	pid       int
}

// waitConstructed waits until k is no longer under construction.
func (c *Caller) waitConstructed(k *Key) error {
	if !k.underConstruction() {
		return nil
	}
	<-k.constructed
	return nil
}

// constructionDone ends a key's construction and wakes its waiters.
func (s *Service) constructionDone(k *Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.has(flagUserConstruct) {
		k.clearFlag(flagUserConstruct)
		close(k.constructed)
	}
}

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
	k, err := c.findOrConstruct(t, desc, callout, dest)
	if err != nil {
		return 0, err
	}
	defer k.put()
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
	sc := &search{cred: &c.cred, typ: t.Name, desc: desc, stateCheck: true, skipExpired: true,
		checkPerm: true, recurse: true, now: c.s.now()}
	sec := c.s.dom.Read()
	defer sec.End()
	k, err := c.searchProcess(sc)
	if err == nil && !k.tryGet() {
		return nil, errAgain
	}
	return k, err
}

// findOrConstruct is request_key_and_link: the returned key holds a
// reference.
func (c *Caller) findOrConstruct(t *Type, desc string, callout []byte, dest ref) (*Key, error) {
	k, err := c.searchFor(t, desc)
	if err == nil {
		if dest.key != nil {
			if !permitted(k, &c.cred, true, Link) {
				k.put()
				return nil, EACCES
			}
			if err := c.s.linkInto(dest.key, k.get(), true); err != nil {
				k.put()
				k.put()
				return nil, err
			}
		}
		return k, nil
	}
	if err != errAgain {
		return nil, err
	}
	if callout == nil {
		return nil, ENOKEY
	}
	if t == keyringType {
		return nil, EPERM
	}
	return c.construct(t, desc, callout, dest)
}

// constructDest picks where a constructed key is linked when the caller
// named no destination (construct_get_dest_keyring). The result holds a
// reference.
func (c *Caller) constructDest() (*Key, error) {
	c.mu.Lock()
	jit := c.jit
	auth := c.auth
	c.mu.Unlock()
	try := func(id Serial, create bool) *Key {
		flags := 0
		if create {
			flags = lookupCreate
		}
		r, err := c.resolve(id, flags)
		if err != nil {
			return nil
		}
		return r.key
	}
	var k *Key
	switch jit {
	case ReqKeyDefault, ReqKeyRequestor:
		if auth != nil && auth.auth != nil && auth.auth.dest != nil && !auth.has(flagRevoked) && auth.auth.dest.tryGet() {
			return auth.auth.dest, nil // no permission check, as in the kernel
		}
		fallthrough
	case ReqKeyThread:
		if k = try(ThreadKeyring, false); k != nil {
			break
		}
		fallthrough
	case ReqKeyProcess:
		if k = try(ProcessKeyring, false); k != nil {
			break
		}
		fallthrough
	case ReqKeySession:
		c.mu.Lock()
		if c.session != nil {
			k = c.session.get()
		}
		c.mu.Unlock()
		if k != nil {
			break
		}
		fallthrough
	case ReqKeyUserSession:
		k = try(UserSessionKeyring, true)
	case ReqKeyUser:
		k = try(UserKeyring, true)
	}
	if k == nil {
		return nil, ENOKEY
	}
	if !permitted(k, &c.cred, true, Write) {
		k.put()
		return nil, EACCES
	}
	return k, nil
}

// construct allocates an uninstantiated key, links it into the
// destination, creates its authorisation and starts the upcall.
func (c *Caller) construct(t *Type, desc string, callout []byte, dest ref) (*Key, error) {
	s := c.s
	var destKey *Key
	if dest.key != nil {
		destKey = dest.key.get()
	} else {
		var err error
		if destKey, err = c.constructDest(); err != nil {
			return nil, err
		}
	}
	defer destKey.put()

	s.constructMu.Lock()
	// Another requester may have started constructing the same key.
	if k, err := c.searchFor(t, desc); err == nil {
		s.constructMu.Unlock()
		if err := s.linkInto(destKey, k.get(), true); err != nil {
			k.put()
			k.put()
			return nil, err
		}
		return k, nil
	}
	k, err := s.alloc(keySpec{typ: t, desc: desc, uid: c.cred.UID, gid: c.cred.GID, perm: defaultPerm(t), quota: true, flags: flagUserConstruct})
	if err != nil {
		s.constructMu.Unlock()
		return nil, err
	}
	k.constructed = make(chan struct{})
	err = s.linkInto(destKey, k.get(), true)
	s.constructMu.Unlock()
	if err != nil {
		k.put()
		s.negate(k, ENOKEY, NegativeTimeout)
		k.put()
		return nil, err
	}

	requestor := c
	if a := c.assumed(); a != nil && a.auth != nil {
		if a.has(flagRevoked) {
			s.negate(k, ENOKEY, NegativeTimeout)
			k.put()
			return nil, EKEYREVOKED
		}
		requestor = a.auth.requestor // a helper asking on behalf of its requestor
	}
	auth, err := s.alloc(keySpec{typ: authType, desc: fmt.Sprintf("%x", uint32(k.serial)), uid: c.cred.UID, gid: c.cred.GID, perm: PermAuthKey})
	if err != nil {
		s.negate(k, ENOKEY, NegativeTimeout)
		k.put()
		return nil, err
	}
	auth.auth = &authRecord{target: k.get(), dest: destKey.get(), callout: append([]byte(nil), callout...), requestor: requestor, pid: requestor.cred.PID}
	s.markInstantiated(auth)

	up := &Upcall{
		Op: "create", Key: k.serial, AuthKey: auth.serial, Type: t.Name, Description: desc,
		CalloutInfo: auth.auth.callout, UID: c.cred.UID, GID: c.cred.GID,
	}
	if th, pr, se := requestor.keyrings(); true {
		if th != nil {
			up.Thread = th.serial
		}
		if pr != nil {
			up.Process = pr.serial
		}
		if se != nil {
			up.Session = se.serial
		} else if us := s.existingUserKeyring(requestor.cred.UID, true); us != nil {
			up.Session = us.serial
		}
	}
	helper := s.NewCaller(Cred{UID: c.cred.UID, GID: c.cred.GID, Groups: c.cred.Groups})
	reqRing, err := s.newKeyring(fmt.Sprintf("_req.%d", k.serial), c.cred.UID, c.cred.GID, PermSessionAnon, false, true, 0)
	if err == nil {
		err = s.linkInto(reqRing, auth.get(), false)
		helper.replaceSession(reqRing)
	}
	if err != nil {
		helper.Release()
		s.finishAuth(auth)
		s.negate(k, ENOKEY, NegativeTimeout)
		k.put()
		return nil, err
	}
	up.Helper = helper
	s.upcalls.Add(1)
	go s.runUpcall(up, k.get(), auth)
	return k, nil
}

// runUpcall runs the helper and completes the construction: a key still
// uninstantiated when the helper is done is negated.
func (s *Service) runUpcall(up *Upcall, k, auth *Key) {
	defer s.upcalls.Done()
	defer k.put()
	ctx, cancel := context.WithTimeout(context.Background(), s.upcallWait)
	var err error
	if s.upcall == nil {
		err = ENOENT
	} else {
		err = s.upcall.Upcall(ctx, up)
	}
	cancel()
	up.Helper.Release()
	if k.underConstruction() {
		_ = err // the key's negative state is what requesters see
		s.negate(k, ENOKEY, NegativeTimeout)
	}
	s.finishAuth(auth)
}

// finishAuth revokes an authorisation key and drops its references.
func (s *Service) finishAuth(auth *Key) {
	s.revoke(auth)
	auth.mu.Lock()
	rec := auth.auth
	auth.mu.Unlock()
	if rec != nil {
		rec.target.put()
		rec.dest.put()
	}
	auth.put()
}

// negate makes an uninstantiated key negative with the given error for
// timeout (0: already expired).
func (s *Service) negate(k *Key, errno Errno, timeout time.Duration) error {
	k.mu.Lock()
	if k.state.Load() != stateUninstantiated {
		k.mu.Unlock()
		return EBUSY
	}
	k.state.Store(-int32(errno))
	k.quota.mu.Lock()
	k.quota.nikeys++
	k.quota.mu.Unlock()
	k.expiry.Store(s.now() + int64(timeout))
	k.mu.Unlock()
	s.constructionDone(k)
	notify(k, NotifyInstantiated, Serial(-int32(errno)))
	s.keyDied(k)
	return nil
}

// authFor returns the caller's assumed authorisation if it is for key id.
func (c *Caller) authFor(id Serial) (*Key, error) {
	a := c.assumed()
	if a == nil || a.auth == nil || a.auth.target.serial != id {
		return nil, EPERM
	}
	return a, nil
}

// authOverride lets the holder of the authorisation for key id reach it
// without the usual permission (describe, set timeout, get security).
func (c *Caller) authOverride(id Serial) (ref, error) {
	a := c.assumed()
	if a == nil || a.auth == nil {
		return ref{}, ENOKEY
	}
	if err := a.validate(c.s.now()); err != nil {
		return ref{}, err
	}
	if a.auth.target.serial != id {
		return ref{}, EACCES
	}
	k := a.auth.target
	if !k.tryGet() {
		return ref{}, ENOKEY
	}
	return ref{k, true}, nil
}

// instantiationDest resolves the keyring argument of instantiate, negate
// and reject (get_instantiation_keyring). The result holds a reference.
func (c *Caller) instantiationDest(ringID Serial, auth *Key) (*Key, error) {
	switch {
	case ringID == 0:
		return nil, nil
	case ringID > 0:
		r, err := c.lookupUserKey(ringID, lookupCreate, Write)
		if err != nil {
			return nil, err
		}
		return r.key, nil
	case ringID == ReqKeyAuthKey:
		return nil, EINVAL
	case ringID < RequestorKeyring:
		return nil, ENOKEY
	}
	d := auth.auth.dest
	if d == nil || !d.tryGet() {
		return nil, nil
	}
	return d, nil
}

// Instantiate gives the key under construction its payload and links it
// into ringID (KEYCTL_INSTANTIATE). Only the helper holding the key's
// authorisation (see AssumeAuthority) may.
func (c *Caller) Instantiate(id Serial, payload []byte, ringID Serial) error {
	return wrap("keyctl_instantiate", id, c.instantiate(id, payload, ringID))
}

func (c *Caller) instantiate(id Serial, payload []byte, ringID Serial) error {
	if len(payload) > MaxPayload {
		return EINVAL
	}
	auth, err := c.authFor(id)
	if err != nil {
		return err
	}
	dest, err := c.instantiationDest(ringID, auth)
	if err != nil {
		return err
	}
	defer dest.put()
	k := auth.auth.target
	t := k.typ.Load()
	if t.Preparse == nil {
		return EINVAL
	}
	p, charge, err := t.Preparse(payload)
	if err != nil {
		return err
	}
	if err := c.s.instantiate(k, p, charge); err != nil {
		p.wipe()
		return err
	}
	if dest != nil {
		if err := c.s.linkInto(dest, k.get(), true); err != nil {
			k.put()
			return err
		}
	}
	c.dropAuthority(auth)
	return nil
}

// Negate makes the key under construction negative for timeout seconds
// (KEYCTL_NEGATE): requesters get ENOKEY until it expires.
func (c *Caller) Negate(id Serial, timeout uint32, ringID Serial) error {
	return wrap("keyctl_negate", id, c.reject(id, timeout, ENOKEY, ringID))
}

// Reject makes the key under construction negative with errno for timeout
// seconds (KEYCTL_REJECT).
func (c *Caller) Reject(id Serial, timeout uint32, errno Errno, ringID Serial) error {
	return wrap("keyctl_reject", id, c.reject(id, timeout, errno, ringID))
}

func (c *Caller) reject(id Serial, timeout uint32, errno Errno, ringID Serial) error {
	if errno == 0 || errno >= 4095 || errno == 512 || errno == 513 || errno == 514 || errno == 516 {
		return EINVAL
	}
	auth, err := c.authFor(id)
	if err != nil {
		return err
	}
	dest, err := c.instantiationDest(ringID, auth)
	if err != nil {
		return err
	}
	defer dest.put()
	if dest != nil && dest.restrict != nil {
		return EPERM
	}
	k := auth.auth.target
	if err := c.s.negate(k, errno, time.Duration(timeout)*time.Second); err != nil {
		return err
	}
	c.dropAuthority(auth)
	if dest != nil {
		if err := c.s.linkInto(dest, k.get(), true); err != nil {
			k.put()
			return err
		}
	}
	return nil
}

// dropAuthority invalidates a used authorisation and forgets it.
func (c *Caller) dropAuthority(auth *Key) {
	c.s.invalidate(auth)
	c.mu.Lock()
	if c.auth == auth {
		c.auth = nil
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
		old := c.auth
		c.auth = nil
		c.mu.Unlock()
		old.put()
		return 0, nil
	}
	sc := &search{cred: &c.cred, typ: authType.Name, desc: fmt.Sprintf("%x", uint32(id)), stateCheck: true,
		checkPerm: true, recurse: true, now: c.s.now()}
	sec := c.s.dom.Read()
	k, err := c.searchProcess(sc)
	if err == nil && !k.tryGet() {
		err = errAgain
	}
	sec.End()
	if err == errAgain {
		return 0, ENOKEY
	}
	if err != nil {
		return 0, err
	}
	if k.has(flagRevoked) {
		k.put()
		return 0, EKEYREVOKED
	}
	c.mu.Lock()
	old := c.auth
	c.auth = k
	c.mu.Unlock()
	old.put()
	return k.serial, nil
}

// SetReqKeyKeyring sets where request_key links keys it constructs when no
// destination is given (KEYCTL_SET_REQKEY_KEYRING) and returns the
// previous setting; ReqKeyNoChange only reads it.
func (c *Caller) SetReqKeyKeyring(n int) (int, error) {
	c.mu.Lock()
	old := c.jit
	c.mu.Unlock()
	switch n {
	case ReqKeyNoChange:
		return old, nil
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
	c.mu.Lock()
	c.jit = n
	c.mu.Unlock()
	return old, nil
}
