package keys

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/tuning"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
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

// Option configures a [Service].
type Option func(*Service)

// WithTunables sets the initial tunables.
func WithTunables(t Tunables) Option { return func(s *Service) { s.tun.Store(&t) } }

// WithClock replaces the service's clock, for tests of expiry. Without
// it the service keeps a coarse clock (see coarseClock).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.clock = now } }

// WithDomain makes the service use d for its grace periods instead of a
// domain of its own (which Close would then not close, but wait for the
// callbacks the service queued on: [rcu.Domain.Barrier]).
func WithDomain(d *rcu.Domain) Option { return func(s *Service) { s.dom, s.ownDom = d, false } }

// WithGCQueue runs the service's collector on q, a queue of the
// service's domain ([WithDomain]), instead of a queue of its own (whose
// worker and watchdog are two goroutines): services that share a domain
// may share one queue, as the seccomp agent's key namespaces do, each
// of the collectors' work items still bounded by its chunk. Close
// cancels the collector's items, and leaves q to its owner.
func WithGCQueue(q *workqueue.Queue) Option { return func(s *Service) { s.gcQueue = q } }

// Service owns every key: the serial index, the key types, the per-user
// quota records and the tunables. It is safe for concurrent use.
type Service struct {
	dom    *rcu.Domain
	ownDom bool
	clock  func() time.Time // set by WithClock; else coarse is used
	coarse coarseClock
	tun    atomic.Pointer[Tunables]
	// tunMu serialises SetTunables, so that onTunables sees the changes
	// in the order they took effect.
	tunMu      sync.Mutex
	onTunables func(Tunables)
	// share, if set (WithShare), bounds what all the service's keys hold
	// together, within what other services hold (share.go).
	share *Share

	index serialIndex
	count atomic.Int64
	// adding serialises add_key's find-or-create of an updatable key per
	// keyring (addLock), as the kernel's keyring lock does.
	adding [64]sync.Mutex
	// restrictMu serialises keyring restrictions (restrictKeyring), so
	// that their check for a loop sees every other one.
	restrictMu sync.Mutex
	// trust holds the system keyrings of trusted certificates.
	trust trustedRings
	// drawSerial, if set (by tests, before the first key), proposes
	// serials instead of the global generator, so that a run replays.
	drawSerial func() Serial

	typesMu sync.RWMutex
	types   map[string]*Type

	usersMu sync.RWMutex
	users   map[uint32]*quotaUser

	// linkMu serialises links of keyrings into keyrings, so that the cycle
	// check sees a stable graph (the kernel's keyring_serialise_link_lock).
	linkMu sync.Mutex

	// specialMu serialises the making of the special keyrings, and
	// joins of named sessions (the kernel's key_session_mutex).
	specialMu sync.Mutex
	register  *Key // .user_reg: holds every _uid.N and _uid_ses.N
	persist   *Key // .persistent_register

	// names lists the keyrings by name, oldest first, for joining a
	// session by name (the kernel's keyring_name_list): every keyring
	// whose name does not begin with '.', from its making to its
	// destruction.
	namesMu sync.Mutex
	names   map[string][]*Key

	destroyed atomic.Int64
	closed    atomic.Bool
	// calls counts the deferrals (burials, payload retirements) between
	// their check of closed and their hand-off to the collector or the
	// domain; Close waits, on callsDone under closeMu, until none is left.
	// Deferrals touch only the atomic: they are on every writer's path and
	// the collector's, which must not contend on one mutex.
	calls     atomic.Int64
	closeMu   sync.Mutex
	callsDone sync.Cond

	upcall      Upcaller
	upcallWait  time.Duration
	constructMu sync.Mutex
	upcalls     sync.WaitGroup

	gcol     *collector
	chunk    int
	chunkSet bool
	gcQueue  *workqueue.Queue
	itemCPU  bool
	// releaseDelay is how long a removed link keeps its key
	// (DefaultReleaseDelay unless releaseSet; gc_release.go).
	releaseDelay time.Duration
	releaseSet   bool
}

// WithGCTuning applies the collector's benchmark-only settings (package
// internal/tuning, so only this module's benchmarks and tests can): the
// work item's chunk size, measuring items' CPU time, the queue it runs
// on.
func WithGCTuning(t tuning.GC) Option {
	return func(s *Service) {
		if t.ChunkSizeSet {
			withChunkSize(t.ChunkSize)(s)
		}
		if t.ItemCPUTime {
			s.itemCPU = true
		}
		if t.Queue != nil {
			s.gcQueue = t.Queue
		}
		if t.ReleaseDelaySet {
			withReleaseDelay(t.ReleaseDelay)(s)
		}
	}
}

// withReleaseDelay sets how long a removed link keeps holding its key
// before the collector drops the reference (default DefaultReleaseDelay).
func withReleaseDelay(d time.Duration) Option {
	return func(s *Service) { s.releaseDelay, s.releaseSet = max(d, 0), true }
}

// withChunkSize bounds how many units of work one collector work item
// does (default DefaultChunkSize); 0 means unbounded.
func withChunkSize(n int) Option { return func(s *Service) { s.chunk, s.chunkSet = max(n, 0), true } }

// withItemCPUTime measures the CPU time of the collector's work items.
func withItemCPUTime() Option { return func(s *Service) { s.itemCPU = true } }

// WithUpcall sets what runs when request_key must construct a key: the
// daemon runs the request-key helper program. Without one, construction
// fails with [ENOENT], as the kernel's does when /sbin/request-key is
// missing.
func WithUpcall(u Upcaller) Option { return func(s *Service) { s.upcall = u } }

// WithUpcallTimeout bounds how long an upcall may take before the key is
// negated (default 60 s).
func WithUpcallTimeout(d time.Duration) Option { return func(s *Service) { s.upcallWait = d } }

// New creates a service with the built-in key types and those registered
// ([Register]) so far.
func New(opts ...Option) *Service {
	s := &Service{
		upcallWait: DefaultUpcallTimeout,
		types:      make(map[string]*Type),
		users:      make(map[uint32]*quotaUser),
		ownDom:     true,
	}
	s.callsDone.L = &s.closeMu
	def := DefaultTunables()
	s.tun.Store(&def)
	for _, o := range opts {
		o(s)
	}
	if s.dom == nil {
		s.dom = rcu.New(rcu.WithName("keys"))
	}
	for _, t := range builtinTypes {
		s.types[t.Name] = t
	}
	for _, t := range registeredTypes() {
		s.types[t.Name] = t
	}
	if !s.chunkSet {
		s.chunk = DefaultChunkSize
	}
	if !s.releaseSet {
		s.releaseDelay = DefaultReleaseDelay
	}
	s.gcol = newCollector(s, s.gcQueue, s.chunk)
	return s
}

// Close releases the service's rcu domain if it owns it. Keys remain
// readable by goroutines that still hold them, but no new work starts.
func (s *Service) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Upcalls are counted under constructMu once closed is checked (see
	// construct.go): after this handshake no new one starts.
	s.constructMu.Lock()
	s.constructMu.Unlock()
	s.upcalls.Wait()
	// Deferrals that saw the service open are handing their work to the
	// collector or the domain: let them finish before either shuts down
	// (a burial after the collector's last sweep would never be destroyed,
	// a Call on a closed domain panics). Later ones run at once.
	s.closeMu.Lock()
	for s.calls.Load() > 0 {
		s.callsDone.Wait()
	}
	s.closeMu.Unlock()
	s.gcol.close()
	s.wipeLive()
	s.index.close()
	s.coarse.close()
	if s.ownDom {
		return s.dom.Close()
	}
	// A domain of its own runs the callbacks queued on it as it closes
	// (payloads wiped after their grace period); a shared one lives on,
	// and is waited for, so that every payload is wiped once Close
	// returns either way.
	return s.dom.Barrier(context.Background())
}

// wipeLive wipes the payloads of the keys still indexed once the service
// is closed: those its own registers hold (a user's keyrings, persistent
// keyrings) and what they link, which no caller can reach any more (an
// agent's container namespace ends so, with its last process). Each
// payload is taken from its key, and wiped (its type's Destroy run: a
// big_key's file is overwritten and closed) once a grace period has
// passed, so that no reader still holds it, as the collector destroys a
// key. Before, Close left them to Go's collector unwiped: a container's
// secrets stayed in the daemon's memory after it ended. Their quota
// charges are not returned (a Share gives them back whole: Detach).
func (s *Service) wipeLive() {
	type dead struct {
		p       *Payload
		destroy func(*Payload)
	}
	var ds []dead
	for k := range s.index.all() {
		k.mu.Lock()
		if p := k.swapPayload(nil); p != nil {
			ds = append(ds, dead{p, k.typ.Load().Destroy})
		}
		k.mu.Unlock()
	}
	if len(ds) == 0 {
		return
	}
	_ = s.dom.Synchronize(context.Background())
	for _, d := range ds {
		d.p.wipe()
		if d.destroy != nil {
			d.destroy(d.p)
		}
	}
}

// Domain returns the rcu domain the service's readers use.
func (s *Service) Domain() *rcu.Domain { return s.dom }

// Tunables returns the current tunables.
func (s *Service) Tunables() Tunables { return *s.tun.Load() }

// SetTunables replaces the tunables. Out-of-range values fail with [EINVAL],
// as writes to /proc/sys/kernel/keys do.
func (s *Service) SetTunables(t Tunables) error {
	if !t.valid() {
		return EINVAL
	}
	s.tunMu.Lock()
	defer s.tunMu.Unlock()
	s.tun.Store(&t)
	if s.onTunables != nil {
		s.onTunables(t)
	}
	return nil
}

// WithTunablesChanged calls fn with the tunables each time
// [Service.SetTunables] replaces them (a sysctl write, a restore), one call
// at a time in the order they took effect: ukeyd sizes its memory limit from
// the quotas.
func WithTunablesChanged(fn func(Tunables)) Option {
	return func(s *Service) { s.onTunables = fn }
}

// DestroyedKeys is how many keys the service has destroyed (payload
// wiped, quota returned) since it started: one atomic load, cheap enough
// to poll, unlike [GCStats], which summarises histograms.
func (s *Service) DestroyedKeys() int64 { return s.destroyed.Load() }

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
	// serial, if not 0, is the key's serial (Import), which must be free;
	// otherwise one is drawn.
	serial Serial
	// regPos, if not nil, is told the key's position in the index's
	// registry (Import, for the keyrings' leaves), with a serial given.
	regPos *uint32
	// rec, if not nil, is the key's record, made ahead with its hash and
	// nothing else (Import, which makes it in another goroutine than
	// the key).
	rec *keyRec
}

// alloc creates an uninstantiated key holding one reference for the
// caller, charged to its owner.
func (s *Service) alloc(sp keySpec) (*Key, error) {
	k, err := makeKey(sp)
	if err != nil {
		return nil, err
	}
	if err := s.admit(k, sp); err != nil {
		return nil, err
	}
	return k, nil
}

// makeKey returns the key sp describes, uninstantiated, with one
// reference, neither charged nor indexed yet ([Service.admit]): it reads
// and writes nothing of a service's, so that [Import] makes keys in one
// goroutine while another admits those made before.
func makeKey(sp keySpec) (*Key, error) {
	if sp.desc == "" {
		return nil, EINVAL
	}
	if sp.typ.VetDescription != nil {
		if err := sp.typ.VetDescription(sp.desc); err != nil {
			return nil, err
		}
	}
	var k *Key
	if sp.rec != nil {
		k = newKeyOf(sp.desc, sp.rec)
	} else {
		k = newKey(sp.desc, indexHash(sp.typ.Name, sp.desc))
	}
	k.typ.Store(sp.typ)
	k.uid.Store(sp.uid)
	k.gid.Store(sp.gid)
	k.perm.Store(uint32(sp.perm))
	k.usage.Store(1)
	k.flags.Store(sp.flags)
	k.quotalen = int32(len(sp.desc) + 1)
	if sp.typ == keyringType {
		k.storeRing(&ringSnap{})
	}
	return k, nil
}

// admit charges k, made by makeKey from sp, to its owner, gives it its
// serial and publishes it; on error, k is neither charged nor indexed.
func (s *Service) admit(k *Key, sp keySpec) error {
	u := s.quotaFor(sp.uid)
	k.quota = u
	if sp.quota || sp.overrun {
		if err := s.charge(u, int(k.quotalen), sp.overrun); err != nil {
			s.quotaPut(u)
			return err
		}
		k.flags.Store(sp.flags | flagInQuota)
	}
	u.mu.Lock()
	u.nkeys++
	u.mu.Unlock()
	if sp.serial != 0 {
		pos, ok := s.index.insertExact(k, sp.serial)
		if !ok {
			// Taken (a stream naming one serial twice): undone.
			u.mu.Lock()
			u.nkeys--
			u.mu.Unlock()
			if k.has(flagInQuota) {
				s.uncharge(u, int(k.quotalen))
			}
			s.quotaPut(u)
			return EEXIST
		}
		if sp.regPos != nil {
			*sp.regPos = pos
		}
		s.count.Add(1)
	} else {
		s.allocSerial(k)
	}
	if sp.typ == keyringType && sp.desc[0] != '.' {
		s.publishName(k)
	}
	return nil
}

// publishName adds keyring k to the list of keyrings by name.
func (s *Service) publishName(k *Key) {
	s.namesMu.Lock()
	if s.names == nil {
		s.names = make(map[string][]*Key)
	}
	s.names[k.description()] = append(s.names[k.description()], k)
	s.namesMu.Unlock()
}

// unpublishName takes a destroyed keyring off the list of keyrings by
// name.
func (s *Service) unpublishName(k *Key) {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	l := s.names[k.description()]
	if i := slices.Index(l, k); i >= 0 {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(s.names, k.description())
	} else {
		s.names[k.description()] = l
	}
}

// keyringsNamed returns the keyrings named name, oldest first.
func (s *Service) keyringsNamed(name string) []*Key {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	return slices.Clone(s.names[name])
}

// deferUnlessClosed hands work to the collector or the rcu domain with
// open, or, once the service is closing and no reader is left, does it at
// once with closed. Close waits for every open that has begun.
func (s *Service) deferUnlessClosed(open, closed func()) {
	// Count first, then check: Close sets closed first, then waits for the
	// count to drain, so one of the two always sees the other.
	s.calls.Add(1)
	if s.closed.Load() {
		s.callDone()
		closed()
		return
	}
	open()
	s.callDone()
}

func (s *Service) callDone() {
	if s.calls.Add(-1) == 0 && s.closed.Load() {
		// Under closeMu, so that the wake-up cannot fall between Close's
		// check of the count and its wait.
		s.closeMu.Lock()
		s.callsDone.Broadcast()
		s.closeMu.Unlock()
	}
}
