package asymmetric

import (
	"crypto/x509"
	"errors"
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/keys"
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

// AddBuiltinTrusted adds a certificate (DER or PEM) to s's
// .builtin_trusted_keys as a built-in key, owned by root and charged to
// no one: what the kernel compiles in ([keys.Service.AddBuiltinTrustedKey]
// makes the key). A private key is refused with EINVAL. It returns the
// key's serial.
func AddBuiltinTrusted(s *keys.Service, cert []byte) (keys.Serial, error) {
	p, charge, err := preparse(cert, func(a *asymKey) error {
		if a.sig == nil {
			return keys.EINVAL // a certificate, not a private key
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return s.AddBuiltinTrustedKey(asymmetricType, p.Extra.(*asymKey).desc, p, charge)
}

// lookupRestriction is the type's LookupRestriction, the kernel's
// asymmetric_lookup_restriction. Anything but the forms above fails with
// EINVAL; a key ID that names nothing, with ENOKEY.
func lookupRestriction(s *keys.Service, spec string) (*keys.Restriction, error) {
	switch spec {
	case "builtin_trusted":
		return &keys.Restriction{Check: func(ring, k *keys.Key) error { return restrictBySignature(s, k, false) }}, nil
	case "builtin_and_secondary_trusted":
		return &keys.Restriction{Check: func(ring, k *keys.Key) error { return restrictBySignature(s, k, true) }}, nil
	}
	method, rest, ok := strings.Cut(spec, ":")
	if method != "key_or_keyring" || !ok {
		return nil, keys.EINVAL
	}
	idText, chainText, hasChain := strings.Cut(rest, ":")
	if hasChain && chainText != "chain" {
		return nil, keys.EINVAL
	}
	id, err := strconv.ParseInt(idText, 0, 32)
	if err != nil {
		return nil, keys.EINVAL
	}
	var trusted *keys.Key
	if id != 0 || !hasChain {
		// key_lookup: any key by serial, referenced, whoever owns it.
		if trusted, err = s.LookupKey(keys.Serial(id)); err != nil {
			return nil, err
		}
	}
	return &keys.Restriction{Trusted: trusted, Check: func(ring, k *keys.Key) error {
		return restrictByKeyOrKeyring(s, ring, k, trusted, hasChain)
	}}, nil
}

// linkedSig returns the certificate signature of a key about to be linked
// into a restricted keyring, or the error the kernel's checks give.
func linkedSig(k *keys.Key) (*certSig, error) {
	if k.Type() != Name {
		return nil, keys.EOPNOTSUPP
	}
	p := k.Payload()
	var a *asymKey
	if p != nil {
		a, _ = p.Extra.(*asymKey)
	}
	if a == nil || a.sig == nil {
		return nil, keys.ENOPKG
	}
	sig := a.sig
	if sig.authIDs[0] == nil && sig.authIDs[1] == nil && sig.authIDs[2] == nil {
		return nil, keys.ENOKEY
	}
	return sig, nil
}

// restrictBySignature is restrict_link_by_builtin_trusted (secondary
// false) and restrict_link_by_builtin_and_secondary_trusted: the signer
// must be a built-in key, or with secondary any key of the secondary
// keyring (which links the built-in one).
func restrictBySignature(s *keys.Service, k *keys.Key, secondary bool) error {
	builtin, secondaryRing, err := s.TrustedKeyrings()
	if err != nil {
		return err
	}
	// The kernel lets the built-in keyring itself be linked into the
	// secondary one.
	if secondary && k == builtin {
		return nil
	}
	return verifySigner(s, func() (*keys.Key, *certSig, error) {
		sig, err := linkedSig(k)
		if err != nil {
			return nil, nil, err
		}
		ring := builtin
		if secondary {
			ring = secondaryRing
		}
		signer, err := findAsymmetric(s, ring, sig.authIDs)
		if err != nil || !secondary && !signer.Builtin() {
			return nil, nil, keys.ENOKEY
		}
		return signer, sig, nil
	})
}

// restrictByKeyOrKeyring is the kernel's key_or_keyring_common: the
// signer is trusted itself (an asymmetric key, matched by its ids), or a
// key in trusted (a keyring), or, with chain, a key already in ring.
func restrictByKeyOrKeyring(s *keys.Service, ring, k, trusted *keys.Key, chain bool) error {
	if ring.Revoked() {
		return keys.EKEYREVOKED
	}
	return verifySigner(s, func() (*keys.Key, *certSig, error) {
		sig, err := linkedSig(k)
		if err != nil {
			return nil, nil, err
		}
		var signer *keys.Key
		if trusted != nil {
			switch {
			case trusted.IsKeyring():
				signer, _ = findAsymmetric(s, trusted, sig.authIDs)
			case trusted.Type() == Name:
				if p := trusted.Payload(); p != nil {
					if a, ok := p.Extra.(*asymKey); ok && signedBy(a, sig) {
						signer = trusted
					}
				}
			default:
				return nil, nil, keys.EOPNOTSUPP
			}
		}
		if signer == nil && chain {
			signer, _ = findAsymmetric(s, ring, sig.authIDs)
		}
		if signer == nil {
			return nil, nil, keys.ENOKEY
		}
		if err := s.Validate(signer); err != nil {
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
func verifySigner(s *keys.Service, find func() (*keys.Key, *certSig, error)) error {
	sec := s.Domain().Read()
	signer, sig, err := find()
	var a *asymKey
	if err == nil {
		if p := signer.Payload(); p != nil {
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
		return keys.EKEYREVOKED
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
func findAsymmetric(s *keys.Service, ring *keys.Key, ids [3][]byte) (*keys.Key, error) {
	want, how := ids[0], idExact
	switch {
	case ids[0] != nil:
	case ids[1] != nil:
		want = ids[1]
	default:
		want, how = ids[2], idName
	}
	k, err := s.SearchKeyring(ring, Name, idMatcher(want, how))
	if err != nil {
		return nil, err
	}
	if ids[0] != nil && ids[1] != nil {
		// Revoked since the search found it: its payload is gone.
		var a *asymKey
		if pl := k.Payload(); pl != nil {
			a, _ = pl.Extra.(*asymKey)
		}
		if a == nil || a.ids[1] == nil || string(a.ids[1]) != string(ids[1]) {
			return nil, keys.EKEYREJECTED
		}
	}
	return k, nil
}

// checkCert checks a certificate's signature with a's public key:
// EKEYREJECTED if it does not verify, ENOPKG if the algorithm is one Go's
// x509 cannot check. The caller holds a.mu.
func (a *asymKey) checkCert(sig *certSig) error {
	if a.wiped {
		return keys.EKEYREVOKED
	}
	if !kernelUsable(a.pub) {
		return keys.EINVAL // the kernel's RSA takes no key of its size
	}
	signer509 := &x509.Certificate{PublicKey: a.pub}
	if err := signer509.CheckSignature(sig.algo, sig.tbs, sig.signature); err != nil {
		if errors.Is(err, x509.ErrUnsupportedAlgorithm) {
			return keys.ENOPKG
		}
		return keys.EKEYREJECTED
	}
	return nil
}
