package keys

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ukeys/ukeys/keyctl"
)

// Type is a key type: how keys of the type validate, store, read and
// describe their payloads. The built-in types are "user", "logon",
// "keyring" and "encrypted"; a package of its own adds a type to every
// [Service] ([Register], as package keys/bigkey adds "big_key" and
// keys/asymmetric "asymmetric"), a program to one Service
// ([Service.RegisterType]).
type Type struct {
	// Name is the type's name, 1 to 31 bytes. Names starting with '.' are
	// internal: callers cannot create such keys.
	Name string
	// VetDescription, if set, checks a new key's description.
	VetDescription func(desc string) error
	// Preparse validates data for instantiation or update and builds the
	// payload to store, with the bytes to charge to the owner's quota.
	// Keyrings have none: their payload is their links.
	Preparse func(data []byte) (p *Payload, charge int, err error)
	// PreparseFor, if set, replaces Preparse where a caller adds,
	// updates or instantiates the key: what the payload holds outside
	// the heap (a big_key's file) is charged to acct, the caller's
	// ([Account]). Preparse stays for a payload made for no caller (a
	// restored one), and should call PreparseFor with the zero Account.
	PreparseFor func(data []byte, acct Account) (p *Payload, charge int, err error)
	// Prepare, if set, replaces Preparse for a type whose payload depends
	// on more than the bytes given: the caller (whose keyrings hold a
	// master key, say), the key's description, and, for an update, the
	// payload it replaces (nil for a new key).
	Prepare func(c *Caller, desc string, old *Payload, data []byte) (p *Payload, charge int, err error)
	// ReadAs, if set, replaces Read for a type whose payload reads
	// differently for each caller (an encrypted key's blob is sealed
	// with the master key the reader's keyrings hold).
	ReadAs func(c *Caller, p *Payload) ([]byte, error)
	// MaxSize, if not 0, is the longest payload Preparse accepts: it refuses
	// a longer one with EINVAL whatever its bytes, so that a caller can be
	// refused before its payload is sent ([Caller.AddKeyCheck]).
	MaxSize int
	// Updatable reports whether keys of the type can be updated in place
	// (add_key on an existing key, KEYCTL_UPDATE).
	Updatable bool
	// Read returns the payload bytes for KEYCTL_READ; nil means the type is
	// not readable (EOPNOTSUPP), like logon.
	Read func(p *Payload) ([]byte, error)
	// Describe returns what /proc/keys shows after the description for a
	// positive key (for example ": 5", the payload length).
	Describe func(k *Key, p *Payload) string
	// Destroy releases what a payload holds outside the heap. The payload
	// has been wiped already.
	Destroy func(p *Payload)
	// ProposeDescription, if set, names a key added with an empty
	// description after its payload (a certificate's subject and key
	// identifier); without it, or if it answers "", an empty description
	// fails with EINVAL.
	ProposeDescription func(p *Payload) string
	// MatchPreparse, if set, reads a description a search is given: a
	// matcher means "every key of the type whose payload it accepts"
	// (the asymmetric type's "id:" and "ex:" lookups), nil an ordinary
	// match by description; an error fails the search.
	MatchPreparse func(desc string) (func(p *Payload) bool, error)
	// Export, if set, hands write what Import needs to make the payload
	// again in the daemon that takes over ([Service.Export]), and wipes
	// whatever copy it made; without it, the payload's Data is written.
	Export func(p *Payload, write func([]byte)) error
	// Import, if set, makes a payload from what Export wrote, with the
	// bytes to charge; without it, Preparse does.
	Import func(desc string, b []byte) (p *Payload, charge int, err error)
	// Costly marks a type whose payloads cost far more CPU to preparse
	// than the rest (a certificate's signature is checked): the kernel
	// charges that to the caller's own task, a daemon that serves every
	// caller must bound it, and tells such calls apart by it before it
	// runs them ([Service.CostlyType], [Caller.CostlyKey]).
	Costly bool
	// Pkey, if set, opens a payload of the type for the public-key
	// operations (KEYCTL_PKEY_*; the kernel's asym_* hooks). It is called in
	// a read section, where the payload is not wiped yet, and what it
	// returns must stay usable outside the section until its
	// [PkeyKey.Release]: an operation can take milliseconds, too long to
	// hold grace periods. Without it those operations fail with EOPNOTSUPP.
	Pkey func(p *Payload) (PkeyKey, error)
	// LookupRestriction, if set, makes a keyring restriction of the
	// type from the restriction string a caller gives
	// (KEYCTL_RESTRICT_KEYRING; the kernel's lookup_restriction); without
	// it, a restriction naming the type fails with ENOENT. A daemon that
	// takes over makes each restriction again from its string, with its
	// own Service.
	LookupRestriction func(s *Service, spec string) (*Restriction, error)
}

// prepare builds the payload of data for a key of type t with
// description desc, replacing old (nil: a new key), by whichever hook the
// type has.
func (t *Type) prepare(c *Caller, desc string, old *Payload, data []byte) (*Payload, int, error) {
	if t.Prepare != nil {
		return t.Prepare(c, desc, old, data)
	}
	return t.preparseFor(c, data)
}

// prepareUpdate is Prepare for an update of a key whose payload is old.
// A negative key has none to make a new one from: the data would be
// taken for a new key's command, where the kernel's encrypted_update
// answers ENOKEY.
func (t *Type) prepareUpdate(c *Caller, desc string, old *Payload, data []byte) (*Payload, int, error) {
	if old == nil {
		return nil, 0, ENOKEY
	}
	return t.Prepare(c, desc, old, data)
}

// preparseFor is t's Preparse for caller c (nil: none), charged to c's
// account where the type charges anything.
func (t *Type) preparseFor(c *Caller, data []byte) (*Payload, int, error) {
	if t.PreparseFor != nil && c != nil {
		return t.PreparseFor(data, Account{share: c.s.share, uid: c.cr().UID})
	}
	return t.Preparse(data)
}

// takesPayloads reports whether keys of type t can be instantiated.
func (t *Type) takesPayloads() bool { return t.Preparse != nil || t.Prepare != nil }

// Limits from the kernel (see package keyctl).
const (
	MaxTypeName      = keyctl.MaxTypeName
	MaxDescription   = keyctl.MaxDescription
	MaxPayload       = keyctl.MaxPayload
	MaxUpdatePayload = keyctl.MaxUpdatePayload
	MaxUserPayload   = keyctl.MaxUserPayload
	MaxBigKeyPayload = keyctl.MaxBigKeyPayload
	MaxCalloutInfo   = keyctl.MaxCalloutInfo
)

func userPreparse(data []byte) (*Payload, int, error) {
	if len(data) == 0 || len(data) > MaxUserPayload {
		return nil, 0, EINVAL
	}
	p := newPayload(data)
	return p, len(data), nil
}

func describeLen(k *Key, p *Payload) string {
	if p == nil {
		return ": 0"
	}
	return fmt.Sprintf(": %d", p.Len())
}

var (
	userType = &Type{
		Name:      "user",
		Preparse:  userPreparse,
		MaxSize:   MaxUserPayload,
		Updatable: true,
		Read:      func(p *Payload) ([]byte, error) { return p.Data, nil },
		Describe:  describeLen,
	}
	logonType = &Type{
		Name: "logon",
		// A logon key's description must name a service: "prefix:rest".
		VetDescription: func(desc string) error {
			if i := strings.IndexByte(desc, ':'); i <= 0 {
				return EINVAL
			}
			return nil
		},
		Preparse:  userPreparse,
		MaxSize:   MaxUserPayload,
		Updatable: true,
		Describe:  describeLen,
	}
	keyringType = &Type{Name: "keyring"} // Describe: see init
	authType    = &Type{
		Name: ".request_key_auth",
		Read: nil, // read specially: the callout info (see read.go)
		Describe: func(k *Key, _ *Payload) string {
			if k.authRec() == nil {
				return ""
			}
			return fmt.Sprintf(" pid:%d ci:%d", k.authRec().pid, len(k.authRec().callout))
		},
	}
	deadType = &Type{Name: ".dead"}

	// builtinTypes are every Service's from New on.
	builtinTypes = []*Type{userType, logonType, keyringType, encryptedType, authType}
)

// registered holds the types Register adds to every Service.
var registered struct {
	mu    sync.Mutex
	types []*Type
}

// Register makes t one of the types every [Service] made afterwards by [New]
// has, as [image.RegisterFormat] makes a format known to [image.Decode]: a
// package that implements a type registers it in its init, and a program
// that wants the type imports that package, for its effect alone if it
// uses nothing else of it. It panics if t is malformed or its name is
// taken by a built-in type or one registered before, as sql.Register
// does: two packages claiming one name is the program's mistake, found
// as it starts.
func Register(t *Type) {
	if t == nil || t.Name == "" || len(t.Name) > MaxTypeName {
		panic("keys: Register of a malformed type")
	}
	registered.mu.Lock()
	defer registered.mu.Unlock()
	for _, u := range slices.Concat(builtinTypes, registered.types) {
		if u.Name == t.Name {
			panic("keys: Register called twice for type " + t.Name)
		}
	}
	registered.types = append(registered.types, t)
}

// registeredTypes returns the types registered so far.
func registeredTypes() []*Type {
	registered.mu.Lock()
	defer registered.mu.Unlock()
	return registered.types
}

// The keyring type's Describe is set here, not in its literal: it reads
// the links through loadRing, which asks whether the key's type is
// keyringType, and a variable's initialiser may not depend on itself.
func init() { keyringType.Describe = describeKeyring }

func describeKeyring(k *Key, _ *Payload) string {
	snap := k.loadRing()
	if snap == nil || snap.n == 0 {
		return ": empty"
	}
	return fmt.Sprintf(": %d", snap.n)
}

// checkTypeName applies the kernel's rules for a type name given by a
// caller: 1 to 31 bytes, and not an internal ('.') type.
func checkTypeName(name string) error {
	if name == "" || len(name) > MaxTypeName {
		return EINVAL
	}
	if name[0] == '.' {
		return EPERM
	}
	return nil
}

// RegisterType adds a key type. It fails with [EEXIST] if the name is taken
// and [EINVAL] if the type is malformed.
func (s *Service) RegisterType(t *Type) error {
	if t == nil || t.Name == "" || len(t.Name) > MaxTypeName {
		return EINVAL
	}
	s.typesMu.Lock()
	defer s.typesMu.Unlock()
	if _, ok := s.types[t.Name]; ok {
		return EEXIST
	}
	s.types[t.Name] = t
	return nil
}

func (s *Service) lookupType(name string) *Type {
	s.typesMu.RLock()
	defer s.typesMu.RUnlock()
	return s.types[name]
}

// UnregisterType removes a key type. Its keys are marked dead (no
// permissions), links to them are pruned from every keyring, and keys
// still referenced lose their payloads, in the kernel's three stages; it
// returns once the collector has finished all three.
func (s *Service) UnregisterType(name string) error {
	s.typesMu.Lock()
	t := s.types[name]
	if t == nil || t == keyringType || t == authType {
		s.typesMu.Unlock()
		if t == nil {
			return ENOKEY
		}
		return EPERM
	}
	delete(s.types, name)
	s.typesMu.Unlock()
	g := s.gcol
	done := make(chan struct{})
	g.mu.Lock()
	for g.deadType != nil { // one type at a time, as the kernel
		wait := g.deadDone
		g.mu.Unlock()
		<-wait
		g.mu.Lock()
	}
	if g.closed {
		// No collector item runs any more: nothing is left to reap with.
		g.mu.Unlock()
		return nil
	}
	g.deadType, g.deadStage, g.deadDone = t, typeReapMark, done
	g.reapRequested = true
	g.mu.Unlock()
	g.kick()
	<-done
	return nil
}

// killPayload finishes off a key of an unregistered type that is still
// referenced: it becomes a .dead key without a payload.
func (s *Service) killPayload(k *Key) {
	k.mu.Lock()
	old := k.typ.Swap(deadType)
	p := k.swapPayload(nil)
	k.mu.Unlock()
	if p != nil {
		s.retirePayload(p, old.Destroy)
	}
}
