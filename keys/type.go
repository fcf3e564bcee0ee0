package keys

import (
	"fmt"
	"strings"
	"unsafe"
)

// Type is a key type: how keys of the type validate, store, read and
// describe their payloads. The built-in types are "user", "logon",
// "keyring" and "big_key"; programs may register their own with
// Service.RegisterType.
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
}

// Limits from the kernel.
const (
	MaxTypeName      = 31
	MaxDescription   = 4095
	MaxPayload       = 1<<20 - 1 // add_key, instantiate
	MaxUpdatePayload = 4096      // KEYCTL_UPDATE
	MaxUserPayload   = 32767     // user and logon keys
	MaxBigKeyPayload = 1 << 20
	MaxCalloutInfo   = 4095
)

func userPreparse(data []byte) (*Payload, int, error) {
	if len(data) == 0 || len(data) > MaxUserPayload {
		return nil, 0, EINVAL
	}
	p := newPayload(data)
	return p, len(data), nil
}

// newPayload returns a payload holding a copy of data. Up to 128 bytes
// (most secrets: passwords, tokens, symmetric keys) the bytes share the
// payload's allocation: one allocation per key instead of two, and one
// cache miss instead of two for every cold read and for the wipe when the
// key is destroyed, which is what a mass reap spends most of its time on.
func newPayload(data []byte) *Payload {
	switch n := len(data); {
	case n <= 8:
		return payloadWith[[8]byte](data)
	case n <= 16:
		return payloadWith[[16]byte](data)
	case n <= 32:
		return payloadWith[[32]byte](data)
	case n <= 64:
		return payloadWith[[64]byte](data)
	case n <= 128:
		return payloadWith[[128]byte](data)
	}
	return &Payload{Data: append([]byte(nil), data...), Len: len(data)}
}

func payloadWith[A any](data []byte) *Payload {
	x := new(struct {
		p   Payload
		buf A
	})
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x.buf)), unsafe.Sizeof(x.buf))
	x.p.Data = b[:copy(b, data):len(data)]
	x.p.Len = len(data)
	return &x.p
}

func describeLen(k *Key, p *Payload) string {
	if p == nil {
		return ": 0"
	}
	return fmt.Sprintf(": %d", p.Len)
}

var (
	userType = &Type{
		Name:      "user",
		Preparse:  userPreparse,
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
		Updatable: true,
		Describe:  describeLen,
	}
	keyringType = &Type{
		Name: "keyring",
		Describe: func(k *Key, _ *Payload) string {
			snap := k.ring.Load()
			if snap == nil || snap.n == 0 {
				return ": empty"
			}
			return fmt.Sprintf(": %d", snap.n)
		},
	}
	authType = &Type{
		Name: ".request_key_auth",
		Read: nil, // read specially: the callout info (see request.go)
		Describe: func(k *Key, _ *Payload) string {
			if k.auth == nil {
				return ""
			}
			return fmt.Sprintf(" pid:%d ci:%d", k.auth.pid, len(k.auth.callout))
		},
	}
	deadType = &Type{Name: ".dead"}
)

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

// RegisterType adds a key type. It fails with EEXIST if the name is taken
// and EINVAL if the type is malformed.
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
