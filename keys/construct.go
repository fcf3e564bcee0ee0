package keys

import (
	"context"
	"errors"
	"fmt"
	"github.com/ukeys/ukeys/keyctl"
	"sync"
	"syscall"
	"time"
)

// NegativeTimeout is how long a key whose construction failed stays
// negative (the kernel's key_negative_timeout).
const NegativeTimeout = keyctl.NegativeTimeout

// DefaultUpcallTimeout is how long a request-key helper may run before the
// key is negated and the helper is killed ([WithUpcallTimeout] changes it).
const DefaultUpcallTimeout = 60 * time.Second

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
	// Thread, Process and Session are the keyrings of the caller that asked
	// (0 if it has none; Session falls back to its user-session keyring),
	// as the kernel passes current's keyrings even when a helper asks on
	// behalf of another requestor.
	Thread, Process, Session Serial
	// Helper is the caller the helper acts as: the requestor's credentials,
	// with a session keyring (_req.N) holding the authorisation key. The
	// service releases it when the upcall returns.
	Helper *Caller

	// auth is the authorisation key AuthKey names (nil in an Upcall that
	// construct did not make), for Authorized, with the service's clock.
	auth *Key
	s    *Service
}

// Args returns the helper's argument vector after the program name, in
// the kernel's convention: create <key> <uid> <gid> <thread> <process>
// <session>.
func (u *Upcall) Args() []string {
	return []string{u.Op, fmt.Sprint(u.Key), fmt.Sprint(u.UID), fmt.Sprint(u.GID),
		fmt.Sprint(u.Thread), fmt.Sprint(u.Process), fmt.Sprint(u.Session)}
}

// Upcaller runs construction helpers. [Upcaller.Upcall] returns when the
// helper is done; if the key is still uninstantiated then, it is negated for
// [NegativeTimeout]. The requester that started the construction then gets
// the [Errno] (or [syscall.Errno]) that Upcall returned, meaning the helper
// could not be run (as [ENOENT] when /sbin/request-key is missing), or
// [ENOKEY] for any other outcome; later requesters see the negative key. ctx
// is cancelled once the upcall timeout ([WithUpcallTimeout]) has passed,
// after the key has been negated; [Service.Close] waits for every Upcall to
// return.
type Upcaller interface {
	Upcall(ctx context.Context, u *Upcall) error
}

// UpcallFunc adapts a function to [Upcaller].
type UpcallFunc func(ctx context.Context, u *Upcall) error

// Upcall calls f.
func (f UpcallFunc) Upcall(ctx context.Context, u *Upcall) error { return f(ctx, u) }

// construction is one upcall in flight. The requester that started it
// waits on done, as the kernel's request_key waits for /sbin/request-key
// to exit, and gets err: the reason the construction failed, or nil.
type construction struct {
	done chan struct{}
	once sync.Once
	err  error
}

// finish records the outcome; only the first call counts, so that the
// upcall timeout and the helper's return cannot both decide it.
func (cn *construction) finish(err error) {
	cn.once.Do(func() {
		cn.err = err
		close(cn.done)
	})
}

// errUpcallTimeout is the cause of an upcall context cancelled by the
// upcall timeout.
var errUpcallTimeout = fmt.Errorf("keys: request-key upcall timed out: %w", context.DeadlineExceeded)

// waitConstructed waits until k is no longer under construction.
func (c *Caller) waitConstructed(k *Key) error {
	if !k.underConstruction() {
		return nil
	}
	// The channel is set under mu before the flag, so a key seen under
	// construction always has one.
	k.mu.Lock()
	var ch chan struct{}
	if e := k.ext.Load(); e != nil {
		ch = e.constructed
	}
	k.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return nil
}

// constructionDone ends a key's construction and wakes its waiters.
func (s *Service) constructionDone(k *Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.has(flagUserConstruct) {
		k.clearFlag(flagUserConstruct)
		close(k.ext.Load().constructed) // made before the flag was set
	}
}

// constructDest picks where a constructed key is linked when the caller
// named no destination (construct_get_dest_keyring). The result holds a
// reference.
func (c *Caller) constructDest() (*Key, error) {
	c.mu.Lock()
	jit := c.jit
	auth := c.auth.Load()
	c.mu.Unlock()
	try := func(id Serial, create bool) *Key {
		var flags lookupFlags
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
		if auth != nil && auth.authRec() != nil && auth.authRec().dest != nil && !auth.has(flagRevoked) && auth.authRec().dest.tryGet() {
			return auth.authRec().dest, nil // no permission check, as in the kernel
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
		if s := c.session.Load(); s != nil {
			k = s.get()
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
	if !permitted(k, c.cr(), true, Write) {
		k.put()
		return nil, EACCES
	}
	return k, nil
}

// construct allocates an uninstantiated key, links it into the
// destination, creates its authorisation and starts the upcall
// (construct_key_and_link). The key returned holds a reference; cn is nil
// when another requester's construction was joined instead.
func (c *Caller) construct(t *Type, desc string, callout []byte, dest ref) (*Key, *construction, error) {
	s := c.s
	var destKey *Key
	if dest.key != nil {
		destKey = dest.key.get()
	} else {
		var err error
		if destKey, err = c.constructDest(); err != nil {
			return nil, nil, err
		}
	}
	defer destKey.put()

	s.constructMu.Lock()
	// Another requester may have started constructing the same key, or
	// finished and negated it, while this one was searching.
	k, err := c.searchFor(t, desc)
	if err == nil {
		s.constructMu.Unlock()
		if err := s.linkInto(destKey, k.get(), true); err != nil {
			k.put()
			k.put()
			return nil, nil, err
		}
		return k, nil, nil
	}
	if err != errAgain {
		s.constructMu.Unlock()
		return nil, nil, err
	}
	// The upcall is counted under constructMu so that Close, once it has
	// set closed, can wait for every upcall that will ever start.
	if s.closed.Load() {
		s.constructMu.Unlock()
		return nil, nil, ENOENT // no helper runs any more, as if it were missing
	}
	s.upcalls.Add(1)
	started := false
	defer func() {
		if !started {
			s.upcalls.Done()
		}
	}()
	k, err = s.alloc(keySpec{typ: t, desc: desc, uid: c.cr().UID, gid: c.cr().GID, perm: defaultPerm(t), quota: true})
	if err != nil {
		s.constructMu.Unlock()
		return nil, nil, err
	}
	// alloc has published the key in the index already: the channel must
	// exist before anyone can see the flag and wait on it.
	k.mu.Lock()
	k.extra().constructed = make(chan struct{})
	k.setFlag(flagUserConstruct)
	k.mu.Unlock()
	err = s.linkInto(destKey, k.get(), true)
	s.constructMu.Unlock()
	if err != nil {
		k.put()
		s.negate(k, ENOKEY, NegativeTimeout) // wakes anyone who found it by serial
		k.put()
		return nil, nil, err
	}
	// fail negates the key when the upcall cannot start, as the kernel's
	// construct_key_and_link does on error.
	fail := func(err error) (*Key, *construction, error) {
		s.negate(k, ENOKEY, NegativeTimeout)
		k.put()
		return nil, nil, err
	}

	requestor := c
	if a := c.assumed(); a != nil && a.authRec() != nil {
		// A helper asking on behalf of its requestor passes the original
		// requestor on; a revoked authority means that request is over.
		if a.has(flagRevoked) {
			return fail(EKEYREVOKED)
		}
		requestor = a.authRec().requestor
	}
	// The kernel makes sure the user keyrings exist before the upcall.
	_, userSession, err := s.userKeyrings(c.cr().UID)
	if err != nil {
		return fail(err)
	}
	auth, err := s.alloc(keySpec{typ: authType, desc: fmt.Sprintf("%x", uint32(k.serial)), uid: c.cr().UID, gid: c.cr().GID, perm: PermAuthKey})
	if err != nil {
		return fail(err)
	}
	auth.extra().auth = &authRecord{target: k.get(), dest: destKey.get(), callout: append([]byte(nil), callout...), requestor: requestor, pid: requestor.cr().PID}
	s.markInstantiated(auth)

	up := &Upcall{
		Op: "create", Key: k.serial, AuthKey: auth.serial, Type: t.Name, Description: desc,
		CalloutInfo: append([]byte(nil), callout...), UID: c.cr().UID, GID: c.cr().GID,
		auth: auth, s: s,
	}
	th, pr, se := c.keyrings()
	if th != nil {
		up.Thread = th.serial
	}
	if pr != nil {
		up.Process = pr.serial
	}
	if se == nil {
		se = userSession
	}
	up.Session = se.serial

	helper := s.NewCaller(Cred{UID: c.cr().UID, GID: c.cr().GID, Groups: c.cr().Groups})
	reqRing, err := s.newKeyring(fmt.Sprintf("_req.%d", k.serial), c.cr().UID, c.cr().GID, PermSessionAnon, false, true, 0)
	if err == nil {
		helper.replaceSession(reqRing)
		if err = s.linkInto(reqRing, auth.get(), false); err != nil {
			auth.put()
		}
	}
	if err != nil {
		helper.Release()
		s.finishAuth(auth)
		return fail(err)
	}
	up.Helper = helper
	cn := &construction{done: make(chan struct{})}
	started = true
	go s.runUpcall(up, k.get(), auth, cn)
	return k, cn, nil
}

// runUpcall runs the helper and completes the construction: a key still
// uninstantiated when the helper is done, or when the upcall timeout
// passes, is negated. The requester that started the construction is
// answered only once the authorisation is revoked and released, as the
// kernel's request_key returns after complete_request_key.
func (s *Service) runUpcall(up *Upcall, k, auth *Key, cn *construction) {
	defer s.upcalls.Done()
	defer k.put()
	var err error
	if s.upcall == nil {
		err = ENOENT
	} else {
		ctx, cancel := context.WithCancelCause(context.Background())
		timedOut := make(chan struct{})
		timer := time.AfterFunc(s.upcallWait, func() {
			defer close(timedOut)
			// Settle the key before cancelling, so that a helper that sees
			// ctx end finds it negated and its authority revoked.
			res := s.settleConstruction(k, ENOKEY)
			s.revoke(auth)
			cn.finish(res)
			cancel(errUpcallTimeout)
		})
		err = s.upcall.Upcall(ctx, up)
		if !timer.Stop() {
			<-timedOut
		}
		cancel(nil)
	}
	up.Helper.Release()
	res := s.settleConstruction(k, upcallErrno(err))
	s.finishAuth(auth)
	cn.finish(res)
}

// settleConstruction is the end of call_sbin_request_key and
// complete_request_key: unless the helper left the key positive and
// valid, or negative, the key is negated and the requester that started
// the construction is to get fail.
func (s *Service) settleConstruction(k *Key, fail Errno) error {
	if !k.underConstruction() && k.validate(s.now()) == nil {
		return nil
	}
	// EBUSY when the helper settled the key meanwhile: its answer stands.
	_ = s.negate(k, ENOKEY, NegativeTimeout)
	return fail
}

// upcallErrno maps what an Upcaller returned to what the constructing
// requester gets if the key was left unconstructed: an errno says the
// helper could not be run; anything else is the kernel's ENOKEY.
func upcallErrno(err error) Errno {
	var e Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	var se syscall.Errno
	if sameNumbering && errors.As(err, &se) && se > 0 && se < 4095 {
		return Errno(se)
	}
	return ENOKEY
}

// negate makes an uninstantiated key negative with the given error for
// timeout (0: already expired).
func (s *Service) negate(k *Key, errno Errno, timeout time.Duration) error {
	k.mu.Lock()
	if k.state.Load() != stateUninstantiated {
		k.mu.Unlock()
		return EBUSY
	}
	k.state.Store(negativeState(errno))
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
	d := auth.authRec().dest
	if d == nil || !d.tryGet() {
		return nil, nil
	}
	return d, nil
}

// linkPrecheck makes the checks of linking k into ring that the kernel
// makes before it instantiates a key (__key_link_begin and the
// restriction), so that a link that is bound to fail leaves the key
// uninstantiated.
func (s *Service) linkPrecheck(ring, k *Key) error {
	if !ring.isKeyring() {
		return ENOTDIR
	}
	ring.mu.Lock()
	defer ring.mu.Unlock()
	if ring.has(flagRevoked | flagInvalidated | flagDead) {
		return EKEYREVOKED
	}
	if r := ring.restriction(); r != nil {
		return r.Check(ring, k)
	}
	return nil
}

// Instantiate gives the key under construction its payload and links it
// into ringID (KEYCTL_INSTANTIATE). Only the helper holding the key's
// authorisation (see [Caller.AssumeAuthority]) may.
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
	k := auth.authRec().target
	t := k.typ.Load()
	if !t.takesPayloads() {
		return EINVAL
	}
	p, charge, err := t.prepare(c, k.description(), nil, payload)
	if err != nil {
		return err
	}
	if dest != nil {
		if err := c.s.linkPrecheck(dest, k); err != nil {
			p.release(nil)
			return err
		}
	}
	if err := c.s.instantiate(k, p, charge); err != nil {
		p.release(nil)
		return err
	}
	c.s.invalidate(auth)
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
// (KEYCTL_NEGATE): requesters get [ENOKEY] until it expires.
func (c *Caller) Negate(id Serial, timeout uint32, ringID Serial) error {
	return wrap("keyctl_negate", id, c.reject(id, timeout, ENOKEY, ringID))
}

// Reject makes the key under construction negative with errno for timeout
// seconds (KEYCTL_REJECT).
func (c *Caller) Reject(id Serial, timeout uint32, errno Errno, ringID Serial) error {
	return wrap("keyctl_reject", id, c.reject(id, timeout, errno, ringID))
}

func (c *Caller) reject(id Serial, timeout uint32, errno Errno, ringID Serial) error {
	// The kernel-internal restart codes must never reach a requester.
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
	k := auth.authRec().target
	// As key_reject_and_link: a restricted destination refuses at once; a
	// link that cannot be made does not stop the negation, but its error
	// is returned and the authority kept.
	var linkErr error
	if dest != nil {
		dest.mu.Lock()
		restricted := dest.restriction() != nil
		dest.mu.Unlock()
		if restricted {
			return EPERM
		}
		linkErr = c.s.linkPrecheck(dest, k)
	}
	if err := c.s.negate(k, errno, time.Duration(timeout)*time.Second); err != nil {
		return err
	}
	c.s.invalidate(auth)
	if dest != nil && linkErr == nil {
		if linkErr = c.s.linkInto(dest, k.get(), true); linkErr != nil {
			k.put()
		}
	}
	if linkErr != nil {
		return linkErr
	}
	c.dropAuthority(auth)
	return nil
}
