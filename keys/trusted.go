package keys

import "sync"

// The system keyrings of trusted keys, as the kernel's
// certs/system_keyring.c makes them: .builtin_trusted_keys, which holds
// the keys the kernel compiles in, and .secondary_trusted_keys, which
// links it and takes keys signed by a key of either. The keyrings are the
// model's (they are special keys a hand-over carries); what their keys
// are and how a signature is checked is the "asymmetric" type's, which
// package keys/asymmetric registers: it parses the certificates
// (AddBuiltinTrustedKey is given its payloads) and its restriction
// builtin_and_secondary_trusted guards the secondary keyring.
//
// ukeys has no built-in keys of its own: the service starts with an
// empty .builtin_trusted_keys keyring, which only AddBuiltinTrustedKey
// fills (the daemon loads a directory of certificates at start).

// trustedRings are the two system keyrings, made on first use.
type trustedRings struct {
	once      sync.Once
	builtin   *Key
	secondary *Key
	err       error
}

// trustedType is the type whose restriction guards the secondary
// keyring, as the kernel's system keyring asks the asymmetric type's
// code for it.
const trustedType = "asymmetric"

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
		// The restriction only makes its check here: it finds the
		// keyrings (TrustedKeyrings) when it runs, once they are made.
		res := rejectAll
		if typ := s.lookupType(trustedType); typ != nil {
			if r, err := s.lookupRestriction(typ, "builtin_and_secondary_trusted"); err == nil {
				res = r
			}
		}
		sec.extra().restrict.Store(res)
		if err := s.linkInto(sec, b.get(), false); err != nil {
			b.put()
		}
		t.builtin, t.secondary = b, sec
	})
	return t, t.err
}

// BuiltinTrustedKeyring and [Service.SecondaryTrustedKeyring] return the
// serials of the system keyrings (.builtin_trusted_keys,
// .secondary_trusted_keys), as the kernel's /proc/keys shows them.
func (s *Service) BuiltinTrustedKeyring() (Serial, error) {
	t, err := s.trusted()
	if err != nil {
		return 0, err
	}
	return t.builtin.serial, nil
}

// SecondaryTrustedKeyring: see [Service.BuiltinTrustedKeyring].
func (s *Service) SecondaryTrustedKeyring() (Serial, error) {
	t, err := s.trusted()
	if err != nil {
		return 0, err
	}
	return t.secondary.serial, nil
}

// TrustedKeyrings returns the system keyrings themselves, for a type's
// restriction to search (the kernel's restrict_link_by_builtin_trusted
// and _and_secondary_trusted): they live as long as the [Service], and
// the caller takes no reference.
func (s *Service) TrustedKeyrings() (builtin, secondary *Key, err error) {
	t, err := s.trusted()
	if err != nil {
		return nil, nil, err
	}
	return t.builtin, t.secondary, nil
}

// AddBuiltinTrustedKey adds a key of type t with description desc and
// payload p (charge the bytes its Preparse counted) to
// .builtin_trusted_keys as a built-in key: owned by root, charged to no
// one, marked built-in ([Key.Builtin]), which is what the kernel compiles
// in. The type's package makes the payload (package keys/asymmetric's
// AddBuiltinTrusted, from a certificate); the key is the model's to make.
// p is the key's from then on, released if the add fails. It returns the
// key's serial.
func (s *Service) AddBuiltinTrustedKey(t *Type, desc string, p *Payload, charge int) (Serial, error) {
	tr, err := s.trusted()
	if err != nil {
		p.release(nil)
		return 0, err
	}
	// The kernel's perms for keys it loads itself: all but setattr for
	// the possessor, view and read for the user.
	perm := (All&^SetAttr)<<PossessorShift | (View|Read)<<UserShift
	k, err := s.alloc(keySpec{typ: t, desc: desc, uid: 0, gid: 0, perm: perm, flags: flagBuiltin})
	if err != nil {
		p.release(nil)
		return 0, err
	}
	if err := s.instantiate(k, p, charge); err != nil {
		p.release(nil)
		k.put()
		return 0, err
	}
	if err := s.linkInto(tr.builtin, k, false); err != nil {
		k.put()
		return 0, err
	}
	return k.serial, nil
}
