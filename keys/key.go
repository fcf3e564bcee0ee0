package keys

import (
	"github.com/ukeys/ukeys/keyctl"

	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Serial identifies a key ([keyctl.Serial]). Positive serials name keys;
// the negative values below name the caller's special keyrings.
type Serial = keyctl.Serial

// Special key ids (KEY_SPEC_*).
const (
	ThreadKeyring      = keyctl.ThreadKeyring
	ProcessKeyring     = keyctl.ProcessKeyring
	SessionKeyring     = keyctl.SessionKeyring
	UserKeyring        = keyctl.UserKeyring
	UserSessionKeyring = keyctl.UserSessionKeyring
	GroupKeyring       = keyctl.GroupKeyring
	ReqKeyAuthKey      = keyctl.ReqKeyAuthKey
	RequestorKeyring   = keyctl.RequestorKeyring
)

// keyState is where a key is in its life as a holder of a payload: it
// is uninstantiated until it gets a payload (positive) or is negated or
// rejected (negative). A negative state is the negated errno that
// requesters get, as the kernel stores it in key->state, so one atomic
// word says both that the key is negative and why.
type keyState int32

const (
	stateUninstantiated keyState = 0
	statePositive       keyState = 1
)

// negativeState is the state of a key negated with errno.
func negativeState(errno Errno) keyState { return keyState(-int32(errno)) }

// negative returns the errno of a negative state.
func (st keyState) negative() (Errno, bool) {
	if st < 0 {
		return Errno(-st), true
	}
	return 0, false
}

// String names the state, for test failures and diagnosis.
func (st keyState) String() string {
	switch st {
	case stateUninstantiated:
		return "uninstantiated"
	case statePositive:
		return "positive"
	}
	if e, ok := st.negative(); ok {
		return "negative (" + e.Error() + ")"
	}
	return fmt.Sprintf("keyState(%d)", int32(st))
}

// atomicState is a keyState read and written atomically: readers load a
// key's state without its lock.
type atomicState struct{ v atomic.Int32 }

func (a *atomicState) Load() keyState    { return keyState(a.v.Load()) }
func (a *atomicState) Store(st keyState) { a.v.Store(int32(st)) }

// Key flags, with the kernel's bit numbers (KEY_FLAG_*).
const (
	flagDead          uint32 = 1 << 0
	flagRevoked       uint32 = 1 << 1
	flagInQuota       uint32 = 1 << 2
	flagUserConstruct uint32 = 1 << 3
	flagInvalidated   uint32 = 1 << 5
	flagUIDKeyring    uint32 = 1 << 9
	flagBuiltin       uint32 = 1 << 10 // loaded as a built-in trusted key
	// flagLogin marks a session keyring made for a login (LoginSession);
	// not a kernel flag (the kernel's comes from pam_keyinit, a program).
	flagLogin uint32 = 1 << 16
)

// Key is one key or keyring. Its exported methods return snapshots; all
// changes go through the [Caller] operations, which check permissions.
type Key struct {
	// A Key holds its pointers, its serial and its description's length,
	// and its other scalars are in a record that holds no pointer
	// (keyRec): Go's collector scans the 64 bytes of a Key and only marks
	// its record, where one 128-byte object would cost each mark all 128
	// (the collector counts an object whole when it scans a span's
	// objects together): over a million keys, most of what a mark scans
	// (BenchmarkMillionKeys).

	typ atomic.Pointer[Type]
	// content is a keyring's links (*ringSnap) or any other key's payload
	// (*Payload), rcu-protected, reached only through loadRing and
	// loadPayload and their writers, which tell the two apart by the
	// key's type: a key is a keyring or not for its whole life. One word
	// for the two saves a word of every key.
	content unsafe.Pointer

	// The owner's record, charged for this key, and through it the
	// service. Guarded by mu; read without it only by the last put,
	// when nobody else holds the key to change it.
	quota *quotaUser

	// parent is the first keyring that links this key, so that the
	// collector can prune a dead key's links in time proportional to its
	// own links rather than by walking every keyring; the others are in
	// ext. Most keys have one. Guarded by parentsMu.
	parent *Key

	// ext holds what few keys have, allocated for the first of them:
	// every field of a Key is a word each of a million keys pays for, in
	// memory and in every mark of Go's collector.
	ext atomic.Pointer[keyExt]

	// desc is the description's bytes and descLen their number: a string
	// split in two so that the serial shares the length's word, and the
	// index's and the tries' checks of a key's serial (serialIndex.keyOf)
	// read the Key alone, not its record too.
	desc    *byte
	descLen uint32
	serial  Serial

	*keyRec // never nil, never replaced
}

// description returns k's description.
func (k *Key) description() string { return unsafe.String(k.desc, k.descLen) }

// newKey returns a key described by desc, with the hash of its type and
// desc, its record, and nothing else set yet.
func newKey(desc string, hash uint64) *Key {
	return newKeyOf(desc, &keyRec{hash: hash})
}

// newKeyOf returns a key described by desc, whose record is rec.
func newKeyOf(desc string, rec *keyRec) *Key {
	return &Key{desc: unsafe.StringData(desc), descLen: uint32(len(desc)), keyRec: rec}
}

// keyRec is the part of a Key that holds no pointer, 64 bytes that Go's
// collector marks without scanning. Its fields are the Key's, promoted.
type keyRec struct {
	state atomicState
	// hash is indexHash of the type the key was created with and its
	// description, kept so that possession tests need not hash again. It
	// is stale once the type is unregistered (typ is then the dead type).
	hash uint64

	// mu serialises writers of this key: payload changes, state changes,
	// attribute changes and, for keyrings, link changes. Readers never
	// take it.
	mu sync.Mutex

	uid, gid atomic.Uint32
	perm     atomic.Uint32
	flags    atomic.Uint32
	expiry   atomic.Int64 // unix nanoseconds; 0 means never
	usage    atomic.Int32
	quotalen int32 // bytes charged: description + 1 + payload; guarded by mu

	parentsMu sync.Mutex
}

// keyExt is the part of a Key that few keys use. Each field is guarded
// as it was in the Key: restrict and watches by the key's mu, parents by
// its parentsMu; constructed is set under mu before the key is seen under
// construction.
type keyExt struct {
	// auth is the request record of an authorisation key, set before
	// the key is published.
	auth     *authRecord
	restrict atomic.Pointer[restriction] // set under the key's mu and the service's restrictMu
	watches  []*watch
	parents  []*Key // the keyrings that link the key, after parent
	// constructed is closed when the key stops being under construction.
	constructed chan struct{}
}

// loadPayload returns k's payload, nil for a keyring and for a key that
// has none.
func (k *Key) loadPayload() *Payload {
	if k.isKeyring() {
		return nil
	}
	return (*Payload)(atomic.LoadPointer(&k.content))
}

// storePayload publishes p as k's payload; k is not a keyring.
func (k *Key) storePayload(p *Payload) {
	if k.isKeyring() {
		panic("keys: a payload for a keyring")
	}
	atomic.StorePointer(&k.content, unsafe.Pointer(p))
}

// swapPayload publishes p as k's payload and returns the one it replaced;
// for a keyring it does nothing and returns nil.
func (k *Key) swapPayload(p *Payload) *Payload {
	if k.isKeyring() {
		return nil
	}
	return (*Payload)(atomic.SwapPointer(&k.content, unsafe.Pointer(p)))
}

// loadRing returns a keyring's links, nil for any other key.
func (k *Key) loadRing() *ringSnap {
	if !k.isKeyring() {
		return nil
	}
	return (*ringSnap)(atomic.LoadPointer(&k.content))
}

// storeRing publishes r as keyring k's links.
func (k *Key) storeRing(r *ringSnap) {
	if !k.isKeyring() {
		panic("keys: links for a key that is not a keyring")
	}
	atomic.StorePointer(&k.content, unsafe.Pointer(r))
}

// extra returns k's ext, making it if k has none.
func (k *Key) extra() *keyExt {
	if e := k.ext.Load(); e != nil {
		return e
	}
	e := new(keyExt)
	if k.ext.CompareAndSwap(nil, e) {
		return e
	}
	return k.ext.Load()
}

// authRec returns an authorisation key's request record, nil for any
// other key.
func (k *Key) authRec() *authRecord {
	if e := k.ext.Load(); e != nil {
		return e.auth
	}
	return nil
}

// restriction returns the keyring's link restriction, nil if none. Once
// set it stays (a destroyed keyring's loses only its reference).
func (k *Key) restriction() *restriction {
	if e := k.ext.Load(); e != nil {
		return e.restrict.Load()
	}
	return nil
}

// Serial returns the key's serial number.
func (k *Key) Serial() Serial { return k.serial }

// Description returns the key's description.
func (k *Key) Description() string { return k.description() }

// Type returns the name of the key's type.
func (k *Key) Type() string { return k.typeName() }

func (k *Key) typeName() string { return k.typ.Load().Name }

func (k *Key) isKeyring() bool { return k.typ.Load() == keyringType }

// IsKeyring reports whether k is a keyring.
func (k *Key) IsKeyring() bool { return k.isKeyring() }

// Payload returns k's payload, nil for a keyring and for a key that has
// none, for a type's own code (a restriction's check reads the key it
// judges). The payload may be replaced and wiped after a grace period: the
// caller must be in a read section of the [Service]'s [Service.Domain], and
// must not use the payload after it ends, unless the type's state keeps
// itself usable (as a [Type.Pkey] hook's does).
func (k *Key) Payload() *Payload { return k.loadPayload() }

// Revoked reports whether k has been revoked, which a type's
// restriction checks of the keyring it guards (the kernel's
// key_or_keyring refuses links into a revoked one).
func (k *Key) Revoked() bool { return k.has(flagRevoked) }

// Builtin reports whether k was added as a built-in trusted key
// ([Service.AddBuiltinTrustedKey]), which is what the restriction
// builtin_trusted trusts.
func (k *Key) Builtin() bool { return k.has(flagBuiltin) }

// Validate is the kernel's key_validate at the [Service]'s clock, for a
// type's code that relies on a key it found (a signer): [ENOKEY] if k was
// invalidated, [EKEYREVOKED] if it was revoked or is dead, [EKEYEXPIRED] if
// it has expired, nil otherwise.
func (s *Service) Validate(k *Key) error { return k.validate(s.now()) }

func (k *Key) has(f uint32) bool { return k.flags.Load()&f != 0 }

func (k *Key) setFlag(f uint32) (was bool) {
	for {
		old := k.flags.Load()
		if old&f != 0 {
			return true
		}
		if k.flags.CompareAndSwap(old, old|f) {
			return false
		}
	}
}

func (k *Key) clearFlag(f uint32) {
	for {
		old := k.flags.Load()
		if old&f == 0 || k.flags.CompareAndSwap(old, old&^f) {
			return
		}
	}
}

// expired reports whether the key's expiry has passed at now.
func (k *Key) expired(now int64) bool {
	e := k.expiry.Load()
	return e != 0 && now >= e
}

// validate is the kernel's key_validate: invalidated, then revoked or
// dead, then expired.
func (k *Key) validate(now int64) error {
	f := k.flags.Load()
	switch {
	case f&flagInvalidated != 0:
		return ENOKEY
	case f&(flagRevoked|flagDead) != 0:
		return EKEYREVOKED
	case k.expired(now):
		return EKEYEXPIRED
	}
	return nil
}

// negativeErr returns the stored error of a negative key.
func (k *Key) negativeErr() error {
	if e, ok := k.state.Load().negative(); ok {
		return e
	}
	return nil
}

func (k *Key) underConstruction() bool { return k.has(flagUserConstruct) }

// tryGet takes a usage reference unless the key is already on its way to
// destruction (usage zero), like the kernel's refcount_inc_not_zero.
func (k *Key) tryGet() bool {
	for {
		u := k.usage.Load()
		if u <= 0 {
			return false
		}
		if k.usage.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// get takes a reference on a key the caller already holds one on.
func (k *Key) get() *Key {
	if k.usage.Add(1) <= 1 {
		panic("keys: reference taken on an unreferenced key")
	}
	return k
}

// put drops a reference; the last one sends the key to the graveyard.
func (k *Key) put() {
	if k == nil {
		return
	}
	switch n := k.usage.Add(-1); {
	case n == 0:
		k.quota.s.unused(k)
	case n < 0:
		panic("keys: key reference count went negative")
	}
}

// putLast drops a reference and reports whether it was the last: the
// caller then owes the key to Service.unusedBatch. Callers that drop many
// at once (the collector, clearing a keyring) bury them together.
func (k *Key) putLast() bool {
	switch n := k.usage.Add(-1); {
	case n == 0:
		return true
	case n < 0:
		panic("keys: key reference count went negative")
	}
	return false
}

// addParent records that ring links k.
func (k *Key) addParent(ring *Key) {
	k.parentsMu.Lock()
	if k.parent == nil {
		k.parent = ring
	} else {
		e := k.extra()
		e.parents = append(e.parents, ring)
	}
	k.parentsMu.Unlock()
}

// removeParent forgets one link of k from ring.
func (k *Key) removeParent(ring *Key) {
	k.parentsMu.Lock()
	defer k.parentsMu.Unlock()
	var e *keyExt
	var parents []*Key
	if e = k.ext.Load(); e != nil {
		parents = e.parents
	}
	last := len(parents) - 1
	if k.parent == ring {
		k.parent = nil
		if last < 0 {
			return
		}
		k.parent = parents[last] // the inline place stays filled
	} else {
		i := slices.Index(parents, ring)
		if i < 0 {
			return
		}
		parents[i] = parents[last]
	}
	parents[last] = nil
	e.parents = parents[:last]
	if last == 0 {
		e.parents = nil
	}
}

// eachParentLocked calls fn with each keyring that links k and returns
// how many there are. k.parentsMu is held.
func (k *Key) eachParentLocked(fn func(ring *Key)) int {
	if k.parent == nil {
		return 0
	}
	fn(k.parent)
	e := k.ext.Load()
	if e == nil {
		return 1
	}
	for _, p := range e.parents {
		fn(p)
	}
	return 1 + len(e.parents)
}

// parentList returns the keyrings that link k.
func (k *Key) parentList() []*Key {
	k.parentsMu.Lock()
	defer k.parentsMu.Unlock()
	var out []*Key
	k.eachParentLocked(func(p *Key) { out = append(out, p) })
	return out
}
