package keys

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/rcu"
)

// Tunables are the kernel's /proc/sys/kernel/keys settings.
type Tunables struct {
	// GCDelay is how long expired and revoked keys stay linked before the
	// collector prunes them (gc_delay).
	GCDelay time.Duration
	// MaxKeys and MaxBytes bound each non-root user's keys (maxkeys,
	// maxbytes); RootMaxKeys and RootMaxBytes bound root's.
	MaxKeys, MaxBytes         int
	RootMaxKeys, RootMaxBytes int
	// PersistentExpiry is the timeout a persistent keyring gets each time
	// it is fetched (persistent_keyring_expiry).
	PersistentExpiry time.Duration
}

// DefaultTunables returns the kernel's defaults.
func DefaultTunables() Tunables {
	return Tunables{
		GCDelay:          300 * time.Second,
		MaxKeys:          200,
		MaxBytes:         20000,
		RootMaxKeys:      1000000,
		RootMaxBytes:     25000000,
		PersistentExpiry: 259200 * time.Second,
	}
}

func (t Tunables) valid() bool {
	const intMax = 1<<31 - 1
	in := func(v int) bool { return v >= 1 && v <= intMax }
	return in(t.MaxKeys) && in(t.MaxBytes) && in(t.RootMaxKeys) && in(t.RootMaxBytes) &&
		t.GCDelay >= 0 && t.GCDelay <= intMax*time.Second &&
		t.PersistentExpiry >= 0 && t.PersistentExpiry <= intMax*time.Second
}

// Option configures a Service.
type Option func(*Service)

// WithTunables sets the initial tunables.
func WithTunables(t Tunables) Option { return func(s *Service) { s.tun.Store(&t) } }

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.clock = now } }

// WithDomain makes the service use d for its grace periods instead of a
// domain of its own (which Close would then not close).
func WithDomain(d *rcu.Domain) Option { return func(s *Service) { s.dom, s.ownDom = d, false } }

// Service owns every key: the serial index, the key types, the per-user
// quota records and the tunables. It is safe for concurrent use.
type Service struct {
	dom    *rcu.Domain
	ownDom bool
	clock  func() time.Time
	tun    atomic.Pointer[Tunables]

	index sync.Map // Serial -> *Key
	count atomic.Int64

	typesMu sync.RWMutex
	types   map[string]*Type

	usersMu sync.Mutex
	users   map[uint32]*quotaUser

	// linkMu serialises links of keyrings into keyrings, so that the cycle
	// check sees a stable graph (the kernel's keyring_serialise_link_lock).
	linkMu sync.Mutex

	specialMu sync.Mutex
	register  *Key // .user_reg: holds every _uid.N and _uid_ses.N
	persist   *Key // .persistent_register
	sessions  []*Key

	destroyed atomic.Int64
	closed    atomic.Bool

	// gc, if set, is told about every key that gains a reason to be
	// reaped (revoked, invalidated, given an expiry).
	gc atomic.Pointer[func(*Key)]

	upcall      Upcaller
	upcallWait  time.Duration
	constructMu sync.Mutex
	upcalls     sync.WaitGroup
}

// WithUpcall sets what runs when request_key must construct a key: the
// daemon runs the request-key helper program. Without one, construction
// fails with ENOENT, as the kernel's does when /sbin/request-key is
// missing.
func WithUpcall(u Upcaller) Option { return func(s *Service) { s.upcall = u } }

// WithUpcallTimeout bounds how long an upcall may take before the key is
// negated (default 60 s).
func WithUpcallTimeout(d time.Duration) Option { return func(s *Service) { s.upcallWait = d } }

// New creates a service with the built-in key types.
func New(opts ...Option) *Service {
	s := &Service{
		clock:      time.Now,
		upcallWait: 60 * time.Second,
		types:      make(map[string]*Type),
		users:      make(map[uint32]*quotaUser),
		ownDom:     true,
	}
	def := DefaultTunables()
	s.tun.Store(&def)
	for _, o := range opts {
		o(s)
	}
	if s.dom == nil {
		s.dom = rcu.New(rcu.WithName("keys"))
	}
	for _, t := range []*Type{userType, logonType, keyringType, bigKeyType, authType} {
		s.types[t.Name] = t
	}
	return s
}

// Close releases the service's rcu domain if it owns it. Keys remain
// readable by goroutines that still hold them, but no new work starts.
func (s *Service) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.upcalls.Wait()
	if s.ownDom {
		return s.dom.Close()
	}
	return nil
}

// Domain returns the rcu domain the service's readers use.
func (s *Service) Domain() *rcu.Domain { return s.dom }

// Tunables returns the current tunables.
func (s *Service) Tunables() Tunables { return *s.tun.Load() }

// SetTunables replaces the tunables. Out-of-range values fail with EINVAL,
// as writes to /proc/sys/kernel/keys do.
func (s *Service) SetTunables(t Tunables) error {
	if !t.valid() {
		return EINVAL
	}
	s.tun.Store(&t)
	return nil
}

func (s *Service) now() int64 { return s.clock().UnixNano() }

// Keys returns the number of keys in the serial index.
func (s *Service) Keys() int { return int(s.count.Load()) }

// lookup finds a live key by serial.
func (s *Service) lookup(id Serial) *Key {
	v, ok := s.index.Load(id)
	if !ok {
		return nil
	}
	return v.(*Key)
}

// allocSerial installs k under a fresh serial: random in [3, 2^30), the
// next free one upward on a collision, as the kernel draws them.
func (s *Service) allocSerial(k *Key) {
	id := Serial(rand.Int32N(1<<30-3) + 3)
	for {
		k.serial = id
		if _, loaded := s.index.LoadOrStore(id, k); !loaded {
			s.count.Add(1)
			return
		}
		if id == 1<<31-1 {
			id = 3
		} else {
			id++
		}
	}
}

// keySpec describes a key to allocate.
type keySpec struct {
	typ      *Type
	desc     string
	uid, gid uint32
	perm     Perm
	// quota: charge the owner (else the kernel's NOT_IN_QUOTA); overrun:
	// charge but never refuse (QUOTA_OVERRUN).
	quota, overrun bool
	flags          uint32
}

// alloc creates an uninstantiated key holding one reference for the
// caller, charged to its owner.
func (s *Service) alloc(sp keySpec) (*Key, error) {
	if sp.desc == "" {
		return nil, EINVAL
	}
	if sp.typ.VetDescription != nil {
		if err := sp.typ.VetDescription(sp.desc); err != nil {
			return nil, err
		}
	}
	k := &Key{desc: sp.desc, s: s}
	k.typ.Store(sp.typ)
	k.uid.Store(sp.uid)
	k.gid.Store(sp.gid)
	k.perm.Store(uint32(sp.perm))
	k.usage.Store(1)
	k.flags.Store(sp.flags)
	u := s.quotaFor(sp.uid)
	k.quota = u
	k.quotalen = len(sp.desc) + 1
	if sp.quota || sp.overrun {
		if err := s.charge(u, k.quotalen, sp.overrun); err != nil {
			s.quotaPut(u)
			return nil, err
		}
		k.flags.Store(sp.flags | flagInQuota)
	}
	u.mu.Lock()
	u.nkeys++
	u.mu.Unlock()
	if sp.typ == keyringType {
		k.ring.Store(&ringSnap{})
	}
	s.allocSerial(k)
	return k, nil
}

// unused takes a key whose last reference is gone out of the index and
// destroys it after a grace period, when no reader can hold it.
func (s *Service) unused(k *Key) {
	s.index.CompareAndDelete(k.serial, k)
	s.count.Add(-1)
	if s.closed.Load() {
		s.destroy(k) // no reader is left once the service is closed
		return
	}
	s.dom.Call(func() { s.destroy(k) })
}

// destroy wipes and releases an unused key and returns its quota.
func (s *Service) destroy(k *Key) {
	k.mu.Lock()
	if p := k.payload.Swap(nil); p != nil {
		p.wipe()
		if d := k.typ.Load().Destroy; d != nil {
			d(p)
		}
	}
	var links []link
	if snap := k.ring.Swap(nil); snap != nil {
		links = snap.links()
	}
	u, ql := k.quota, k.quotalen
	inQuota := k.has(flagInQuota)
	instantiated := k.state.Load() != stateUninstantiated
	watches := k.watches
	k.watches = nil
	k.mu.Unlock()
	for _, w := range watches {
		w.removed(k.serial)
	}
	if inQuota {
		s.uncharge(u, ql)
	}
	u.mu.Lock()
	u.nkeys--
	if instantiated {
		u.nikeys--
	}
	u.mu.Unlock()
	s.quotaPut(u)
	s.destroyed.Add(1)
	// A destroyed keyring drops its links.
	for _, l := range links {
		l.key.put()
	}
}
