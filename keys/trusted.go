package keys

import (
	"crypto/x509"
	"errors"
	"strconv"
	"strings"
	"sync"
)

// The asymmetric type's keyring restrictions, as the kernel's
// asymmetric_lookup_restriction offers them:
//
//	builtin_trusted                 signed by a key of .builtin_trusted_keys
//	builtin_and_secondary_trusted   …or of .secondary_trusted_keys
//	key_or_keyring:ID               signed by key ID, or by a key in keyring ID
//	key_or_keyring:ID:chain         …or by a key already in the restricted keyring
//	                                (ID 0: by one in the restricted keyring only)
//
// Only asymmetric keys may then be linked in (EOPNOTSUPP for others, a
// keyring included), each carrying a certificate's signature (ENOPKG for
// a bare private key) made by a key found as the scheme says (ENOKEY if
// none is), which must verify (EKEYREJECTED).
//
// The kernel's built-in trusted keys are compiled into it. ukeys has none
// of its own: the service starts with an empty .builtin_trusted_keys
// keyring, which only AddBuiltinTrusted fills (the daemon loads a
// directory of certificates at start), and a .secondary_trusted_keys
// keyring that links it and accepts certificates signed by either.

// trustedRings are the two system keyrings, made on first use.
type trustedRings struct {
	once      sync.Once
	builtin   *Key
	secondary *Key
	err       error
}

// Permissions of the kernel's system keyrings: everything but setattr
// for the possessor, view, read and search for the owner's user (and
// write too on the secondary keyring, so that root may add to it).
const (
	permBuiltinTrusted   Perm = (All&^SetAttr)<<PossessorShift | (View|Read|Search)<<UserShift
	permSecondaryTrusted Perm = permBuiltinTrusted | Write<<UserShift
)

// trusted returns the system keyrings, making them the first time.
func (s *Service) trusted() (*trustedRings, error) {
	t := &s.trust
	t.once.Do(func() {
		b, err := s.newKeyring(".builtin_trusted_keys", 0, 0, permBuiltinTrusted, false, false, 0)
		if err != nil {
			t.err = err
			return
		}
		sec, err := s.newKeyring(".secondary_trusted_keys", 0, 0, permSecondaryTrusted, false, false, 0)
		if err != nil {
			b.put()
			t.err = err
			return
		}
		sec.extra().restrict.Store(&restriction{check: func(ring, k *Key) error {
			return s.restrictBySignature(k, true)
		}, spec: "builtin_and_secondary_trusted"})
		if err := s.linkInto(sec, b.get(), false); err != nil {
			b.put()
		}
		t.builtin, t.secondary = b, sec
	})
	return t, t.err
}

// BuiltinTrustedKeyring and SecondaryTrustedKeyring return the serials of
// the system keyrings (.builtin_trusted_keys, .secondary_trusted_keys),
// as the kernel's /proc/keys shows them.
func (s *Service) BuiltinTrustedKeyring() (Serial, error) {
	t, err := s.trusted()
	if err != nil {
		return 0, err
	}
	return t.builtin.serial, nil
}

// SecondaryTrustedKeyring: see BuiltinTrustedKeyring.
func (s *Service) SecondaryTrustedKeyring() (Serial, error) {
	t, err := s.trusted()
	if err != nil {
		return 0, err
	}
	return t.secondary.serial, nil
}

// AddBuiltinTrusted adds a certificate (DER or PEM) to
// .builtin_trusted_keys as a built-in key, owned by root and charged to
// no one: what the kernel compiles in. It returns the key's serial.
func (s *Service) AddBuiltinTrusted(cert []byte) (Serial, error) {
	t, err := s.trusted()
	if err != nil {
		return 0, err
	}
	p, charge, err := asymmetricPreparse(cert)
	if err != nil {
		return 0, err
	}
	a := p.Extra.(*asymKey)
	if a.sig == nil {
		p.release(nil)
		return 0, EINVAL // a certificate, not a private key
	}
	// The kernel's perms for keys it loads itself: all but setattr for
	// the possessor, view and read for the user.
	perm := (All&^SetAttr)<<PossessorShift | (View|Read)<<UserShift
	k, err := s.alloc(keySpec{typ: asymmetricType, desc: a.desc, uid: 0, gid: 0, perm: perm, flags: flagBuiltin})
	if err != nil {
		p.release(nil)
		return 0, err
	}
	if err := s.instantiate(k, p, charge); err != nil {
		p.release(nil)
		k.put()
		return 0, err
	}
	if err := s.linkInto(t.builtin, k, false); err != nil {
		k.put()
		return 0, err
	}
	return k.serial, nil
}

// asymmetricRestriction parses a restriction of the asymmetric type.
// Anything but the forms above fails with EINVAL; a key ID that names
// nothing, with ENOKEY.
func (s *Service) asymmetricRestriction(spec string) (*restriction, error) {
	switch spec {
	case "builtin_trusted":
		return &restriction{check: func(ring, k *Key) error { return s.restrictBySignature(k, false) }}, nil
	case "builtin_and_secondary_trusted":
		return &restriction{check: func(ring, k *Key) error { return s.restrictBySignature(k, true) }}, nil
	}
	method, rest, ok := strings.Cut(spec, ":")
	if method != "key_or_keyring" || !ok {
		return nil, EINVAL
	}
	idText, chainText, hasChain := strings.Cut(rest, ":")
	if hasChain && chainText != "chain" {
		return nil, EINVAL
	}
	id, err := strconv.ParseInt(idText, 0, 32)
	if err != nil {
		return nil, EINVAL
	}
	var trusted *Key
	if id != 0 || !hasChain {
		// key_lookup: any key by serial, referenced, whoever owns it.
		sec := s.dom.Read()
		trusted = s.lookup(Serial(id))
		if trusted != nil && !trusted.tryGet() {
			trusted = nil
		}
		sec.End()
		if trusted == nil {
			return nil, ENOKEY
		}
	}
	res := &restriction{key: trusted}
	res.check = func(ring, k *Key) error { return s.restrictByKeyOrKeyring(ring, k, trusted, hasChain) }
	return res, nil
}

// linkedSig returns the certificate signature of a key about to be linked
// into a restricted keyring, or the error the kernel's checks give.
func linkedSig(k *Key) (*certSig, error) {
	if k.typ.Load() != asymmetricType {
		return nil, EOPNOTSUPP
	}
	p := k.loadPayload()
	var a *asymKey
	if p != nil {
		a, _ = p.Extra.(*asymKey)
	}
	if a == nil || a.sig == nil {
		return nil, ENOPKG
	}
	sig := a.sig
	if sig.authIDs[0] == nil && sig.authIDs[1] == nil && sig.authIDs[2] == nil {
		return nil, ENOKEY
	}
	return sig, nil
}

// restrictBySignature is restrict_link_by_builtin_trusted (secondary
// false) and restrict_link_by_builtin_and_secondary_trusted: the signer
// must be a built-in key, or with secondary any key of the secondary
// keyring (which links the built-in one).
func (s *Service) restrictBySignature(k *Key, secondary bool) error {
	t, err := s.trusted()
	if err != nil {
		return err
	}
	// The kernel lets the built-in keyring itself be linked into the
	// secondary one.
	if secondary && k == t.builtin {
		return nil
	}
	return s.verifySigner(func() (*Key, *certSig, error) {
		sig, err := linkedSig(k)
		if err != nil {
			return nil, nil, err
		}
		ring := t.builtin
		if secondary {
			ring = t.secondary
		}
		signer, err := s.findAsymmetric(ring, sig.authIDs)
		if err != nil || !secondary && !signer.has(flagBuiltin) {
			return nil, nil, ENOKEY
		}
		return signer, sig, nil
	})
}

// restrictByKeyOrKeyring is the kernel's key_or_keyring_common: the
// signer is trusted itself (an asymmetric key, matched by its ids), or a
// key in trusted (a keyring), or, with chain, a key already in ring.
func (s *Service) restrictByKeyOrKeyring(ring, k, trusted *Key, chain bool) error {
	if ring.has(flagRevoked) {
		return EKEYREVOKED
	}
	return s.verifySigner(func() (*Key, *certSig, error) {
		sig, err := linkedSig(k)
		if err != nil {
			return nil, nil, err
		}
		var signer *Key
		if trusted != nil {
			switch trusted.typ.Load() {
			case keyringType:
				signer, _ = s.findAsymmetric(trusted, sig.authIDs)
			case asymmetricType:
				if p := trusted.loadPayload(); p != nil {
					if a, ok := p.Extra.(*asymKey); ok && signedBy(a, sig) {
						signer = trusted
					}
				}
			default:
				return nil, nil, EOPNOTSUPP
			}
		}
		if signer == nil && chain {
			signer, _ = s.findAsymmetric(ring, sig.authIDs)
		}
		if signer == nil {
			return nil, nil, ENOKEY
		}
		if err := signer.validate(s.now()); err != nil {
			return nil, nil, err
		}
		return signer, sig, nil
	})
}

// verifySigner finds a signer and the signature to check with find,
// inside a read section, and checks the signature after the section: a
// public-key operation (tens to hundreds of microseconds) would hold
// every grace period that long. The signer's parsed key is locked
// against wiping before the section ends.
func (s *Service) verifySigner(find func() (*Key, *certSig, error)) error {
	sec := s.dom.Read()
	signer, sig, err := find()
	var a *asymKey
	if err == nil {
		if p := signer.loadPayload(); p != nil {
			a, _ = p.Extra.(*asymKey)
		}
		if a != nil {
			a.mu.RLock()
		}
	}
	sec.End()
	if err != nil {
		return err
	}
	if a == nil {
		return EKEYREVOKED
	}
	defer a.mu.RUnlock()
	return a.checkCert(sig)
}

// signedBy is key_or_keyring_common's test of a trusted key against the
// ids a signature names: with neither of the first two, the subject
// (third) must match; with one, it must match either of the key's first
// two; with both, the key id must match the key's second and the other
// either.
func signedBy(a *asymKey, sig *certSig) bool {
	ids := sig.authIDs
	same := func(x, y []byte) bool { return x != nil && y != nil && string(x) == string(y) }
	either := func(id []byte) bool { return same(a.ids[0], id) || same(a.ids[1], id) }
	switch {
	case ids[0] == nil && ids[1] == nil:
		return same(a.ids[2], ids[2])
	case ids[0] == nil || ids[1] == nil:
		id := ids[0]
		if id == nil {
			id = ids[1]
		}
		return either(id)
	}
	return same(a.ids[1], ids[1]) && either(ids[0])
}

// findAsymmetric is the kernel's find_asymmetric_key (exact matching):
// the first id given is looked up in ring's tree ("ex:" on the first two
// ids, or "dn:" on the subject when neither of the first two is known);
// with both of the first two, the key found must also have the second as
// its second id (EKEYREJECTED otherwise). The caller is in a read
// section.
func (s *Service) findAsymmetric(ring *Key, ids [3][]byte) (*Key, error) {
	want, how := ids[0], idExact
	switch {
	case ids[0] != nil:
	case ids[1] != nil:
		want = ids[1]
	default:
		want, how = ids[2], idName
	}
	sc := &search{typ: asymmetricType.Name, stateCheck: true, recurse: true, now: s.now(), match: idMatcher(want, how)}
	k, err := sc.tree(ring, true)
	if err != nil {
		return nil, ENOKEY
	}
	if ids[0] != nil && ids[1] != nil {
		// Revoked since the search found it: its payload is gone.
		var a *asymKey
		if pl := k.loadPayload(); pl != nil {
			a, _ = pl.Extra.(*asymKey)
		}
		if a == nil || a.ids[1] == nil || string(a.ids[1]) != string(ids[1]) {
			return nil, EKEYREJECTED
		}
	}
	return k, nil
}

// checkCert checks a certificate's signature with a's public key:
// EKEYREJECTED if it does not verify, ENOPKG if the algorithm is one Go's
// x509 cannot check. The caller holds a.mu.
func (a *asymKey) checkCert(sig *certSig) error {
	if a.wiped {
		return EKEYREVOKED
	}
	if !kernelUsable(a.pub) {
		return EINVAL // the kernel's RSA takes no key of its size
	}
	signer509 := &x509.Certificate{PublicKey: a.pub}
	if err := signer509.CheckSignature(sig.algo, sig.tbs, sig.signature); err != nil {
		if errors.Is(err, x509.ErrUnsupportedAlgorithm) {
			return ENOPKG
		}
		return EKEYREJECTED
	}
	return nil
}
