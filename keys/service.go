package keys

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

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

// Option configures a Service.
type Option func(*Service)

// WithTunables sets the initial tunables.
func WithTunables(t Tunables) Option { return func(s *Service) { s.tun.Store(&t) } }

// WithClock replaces the service's clock, for tests of expiry. Without
// it the service keeps a coarse clock (see coarseClock).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.clock = now } }

// WithDomain makes the service use d for its grace periods instead of a
// domain of its own (which Close would then not close).
func WithDomain(d *rcu.Domain) Option { return func(s *Service) { s.dom, s.ownDom = d, false } }

// Service owns every key: the serial index, the key types, the per-user
// quota records and the tunables. It is safe for concurrent use.
type Service struct {
	dom    *rcu.Domain
	ownDom bool
	clock  func() time.Time // set by WithClock; else coarse is used
	coarse coarseClock
	tun    atomic.Pointer[Tunables]

	index serialIndex
	count atomic.Int64
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

	specialMu sync.Mutex
	register  *Key // .user_reg: holds every _uid.N and _uid_ses.N
	persist   *Key // .persistent_register
	sessions  []*Key

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
}

// WithChunkSize bounds how many keys one collector work item scans or
// destroys (default DefaultChunkSize); 0 means unbounded, the kernel's
// behaviour before it learnt to process in chunks.
func WithChunkSize(n int) Option { return func(s *Service) { s.chunk, s.chunkSet = max(n, 0), true } }

// WithItemCPUTime makes the collector measure the CPU time of each of its
// work items (GCStats.ItemCPU), for benchmarks and diagnosis. Measuring
// pins the worker goroutine to its OS thread for each item, and Go's
// scheduler is slower to hand processors back and forth around a pinned
// goroutine: in a mass expiry of a million keys under two CPU-bound
// foreground goroutines, pinning doubled the worst foreground operation
// (median of 7 runs: 39 ms against 20 ms). Off by default.
func WithItemCPUTime() Option { return func(s *Service) { s.itemCPU = true } }

// WithGCQueue runs the collector on q instead of a queue of its own.
func WithGCQueue(q *workqueue.Queue) Option { return func(s *Service) { s.gcQueue = q } }

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
		upcallWait: 60 * time.Second,
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
	for _, t := range []*Type{userType, logonType, keyringType, bigKeyType, authType} {
		s.types[t.Name] = t
	}
	if !s.chunkSet {
		s.chunk = DefaultChunkSize
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
	// request.go): after this handshake no new one starts.
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
	s.coarse.close()
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

// now is the service's time in unix nanoseconds, for expiry.
func (s *Service) now() int64 {
	if s.clock != nil {
		return s.clock().UnixNano()
	}
	return s.coarse.read()
}

// Keys returns the number of keys in the serial index.
func (s *Service) Keys() int { return int(s.count.Load()) }

// DestroyedKeys is how many keys the service has destroyed (payload
// wiped, quota returned) since it started: one atomic load, cheap enough
// to poll, unlike GCStats, which summarises histograms.
func (s *Service) DestroyedKeys() int64 { return s.destroyed.Load() }

// lookup finds a live key by serial. It takes no lock.
func (s *Service) lookup(id Serial) *Key { return s.index.load(id) }

// allocSerial installs k under a fresh serial: random in [3, 2^30), the
// next free one upward on a collision, as the kernel draws them.
func (s *Service) allocSerial(k *Key) {
	var id Serial
	if s.drawSerial != nil {
		id = s.drawSerial()
	} else {
		id = Serial(rand.Int32N(1<<30-3) + 3)
	}
	s.index.insert(k, id)
	s.count.Add(1)
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
	k := &Key{desc: sp.desc, s: s, hash: indexHash(sp.typ.Name, sp.desc)}
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

// unused takes a key whose last reference is gone out of the index and
// destroys it after a grace period, when no reader can hold it.
func (s *Service) unused(k *Key) {
	s.unusedBatch([]*Key{k})
}

// unusedBatch is unused for many keys at once: one hand-off to the
// collector for all of them.
func (s *Service) unusedBatch(ks []*Key) {
	if len(ks) == 0 {
		return
	}
	// Counted as outstanding before they leave the index, so that WaitGC
	// never sees a key gone from the index whose destruction it does not
	// wait for.
	g := s.gcol
	g.outstanding.Add(int64(len(ks)))
	for _, k := range ks {
		if s.index.remove(k) {
			s.count.Add(-1)
		}
	}
	s.deferUnlessClosed(func() { g.buriedAll(ks) }, func() {
		for _, k := range ks {
			s.destroy(k)
			g.outstanding.Add(-1)
		}
	})
}

// destroy wipes and releases an unused key and returns its quota.
func (s *Service) destroy(k *Key) {
	var r quotaReturns
	s.destroyInto(k, &r)
	s.returnQuota(r)
}

// destroyInto is destroy with the key's quota gathered into r, which the
// caller returns (returnQuota) once it has destroyed a batch.
func (s *Service) destroyInto(k *Key, r *quotaReturns) {
	k.mu.Lock()
	if p := k.payload.Swap(nil); p != nil {
		p.wipe()
		if d := k.typ.Load().Destroy; d != nil {
			d(p)
		}
	}
	var links []link
	// Only keyrings have links: a load first spares every other key an
	// atomic exchange (and, while Go's collector marks, a write barrier).
	if k.ring.Load() != nil {
		if snap := k.ring.Swap(nil); snap != nil && snap.n > 0 {
			links = make([]link, 0, snap.n)
			hwalk(snap.root, func(l link) bool { links = append(links, l); return true })
		}
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
	r.add(u, inQuota, ql, instantiated)
	s.destroyed.Add(1)
	// A destroyed keyring drops its links.
	keys := make([]*Key, len(links))
	for i, l := range links {
		l.key.removeParent(k)
		keys[i] = l.key
	}
	s.putAll(keys)
}

// serialIndex maps serials to keys, the kernel's key_serial_tree. Readers
// take no lock: the index is split into 256 shards by a hash of the
// serial, each an open-addressed table of atomic pointers probed
// linearly. Writers (allocation, removal) hold their shard's mutex and
// store into the current table; a table that fills up (or empties) is
// rebuilt at its new size and published with one atomic store, which
// stalls only that shard's writers, for a 256th of the index. A reader
// still probing a table that was replaced sees the keys it held then;
// callers vet what they find with tryGet, as they would a key whose last
// reference is dropped after the lookup.
//
// Compared with a sync.Map it allocates nothing per key (a slot costs 8
// to 16 bytes) and a lookup boxes nothing.
type serialIndex struct {
	shards [indexShards]indexShard
}

const (
	indexShardBits = 8
	indexShards    = 1 << indexShardBits
	indexMinSlots  = 16
)

type indexShard struct {
	mu  sync.Mutex
	tab atomic.Pointer[indexTable]
	_   [64 - 16]byte // one cache line per shard
}

// indexTable is one version of a shard's table: a power-of-two number of
// slots, each nil (free, ends a probe), tombstone (removed, probes go on)
// or a key.
type indexTable struct {
	slots []atomic.Pointer[Key]
	bits  uint
	// Guarded by the shard's mu. serials holds the serial of the key in
	// each slot, for writers: probing and rebuilding a table then reads
	// two arrays in order instead of every key it passes, each a cache
	// miss in a large index (a rebuild of a 4,096-key shard took 200 µs
	// that way, and a mass reap crosses every shard's threshold at once).
	serials []Serial
	used    int // slots not nil
	live    int // slots holding keys
}

// tombstone marks a removed entry.
var tombstone = new(Key)

func serialHash(id Serial) uint64 { return uint64(uint32(id)) * 0x9e3779b97f4a7c15 }

func (x *serialIndex) shard(h uint64) *indexShard { return &x.shards[h>>(64-indexShardBits)] }

// home is the first slot a probe for hash h looks at.
func (t *indexTable) home(h uint64) uint64 { return (h << indexShardBits) >> (64 - t.bits) }

func (x *serialIndex) load(id Serial) *Key {
	h := serialHash(id)
	t := x.shard(h).tab.Load()
	if t == nil {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		k := t.slots[i].Load()
		if k == nil {
			return nil
		}
		if k.serial == id && k != tombstone {
			return k
		}
	}
}

// insert gives k the first serial from id upward that is free (wrapping
// from 2^31-1 to 3) and stores it.
func (x *serialIndex) insert(k *Key, id Serial) {
	for {
		h := x.shard(serialHash(id))
		h.mu.Lock()
		if h.insertLocked(k, id) {
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		if id == 1<<31-1 {
			id = 3
		} else {
			id++
		}
	}
}

// insertLocked stores k under id unless id is taken.
func (sh *indexShard) insertLocked(k *Key, id Serial) bool {
	h := serialHash(id)
	t := sh.tab.Load()
	if t == nil || 4*(t.used+1) > 3*len(t.slots) {
		live := 0
		if t != nil {
			live = t.live
		}
		t = sh.rebuild(t, 2*(live+1))
	}
	mask := uint64(len(t.slots) - 1)
	free := -1
	for i := t.home(h); ; i = (i + 1) & mask {
		e := t.slots[i].Load()
		if e == nil {
			if free < 0 {
				free = int(i)
				t.used++
			}
			break
		}
		if e == tombstone {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		if t.serials[i] == id {
			return false
		}
	}
	k.serial = id // before the store that publishes k
	t.serials[free] = id
	t.slots[free].Store(k)
	t.live++
	return true
}

// remove takes k out of the index if it is there, and reports whether it
// was.
func (x *serialIndex) remove(k *Key) bool {
	h := serialHash(k.serial)
	sh := x.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if t == nil {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		e := t.slots[i].Load()
		if e == nil {
			return false
		}
		if e == k {
			t.slots[i].Store(tombstone)
			t.live--
			break
		}
	}
	if len(t.slots) > indexMinSlots && 8*t.live < len(t.slots) {
		sh.rebuild(t, 2*t.live)
	}
	return true
}

// rebuild publishes a table of at least want slots (at least twice the
// live keys) holding old's keys. Called with the shard's mu held.
func (sh *indexShard) rebuild(old *indexTable, want int) *indexTable {
	b := uint(4)
	for 1<<b < want || 1<<b < indexMinSlots {
		b++
	}
	t := &indexTable{slots: make([]atomic.Pointer[Key], 1<<b), serials: make([]Serial, 1<<b), bits: b}
	if old != nil {
		mask := uint64(len(t.slots) - 1)
		for i := range old.slots {
			k := old.slots[i].Load()
			if k == nil || k == tombstone {
				continue
			}
			id := old.serials[i]
			j := t.home(serialHash(id))
			for t.slots[j].Load() != nil {
				j = (j + 1) & mask
			}
			t.serials[j] = id
			t.slots[j].Store(k)
			t.used++
			t.live++
		}
	}
	sh.tab.Store(t)
	return t
}

// indexCursor is a place in a scan of the index: the collector's, which
// resumes from it item after item while keys come and go.
type indexCursor struct {
	shard int
	tab   *indexTable // the shard's table when the scan entered it
	slot  int
}

// scan appends to out up to n keys from the cursor on, advancing it, and
// reports whether the scan has passed the last shard. Every key indexed
// for the whole of a scan is returned at least once: a shard whose table
// was rebuilt since the cursor entered it is scanned again from its start
// (returning some keys twice, which the collector tolerates). Keys added
// or removed during the scan may or may not be returned, as with the
// kernel's walk of its serial tree.
func (x *serialIndex) scan(c *indexCursor, n int, out []*Key) ([]*Key, bool) {
	for ; c.shard < indexShards; c.shard, c.tab, c.slot = c.shard+1, nil, 0 {
		t := x.shards[c.shard].tab.Load()
		if t != c.tab {
			c.tab, c.slot = t, 0
		}
		if t == nil {
			continue
		}
		for c.slot < len(t.slots) {
			k := t.slots[c.slot].Load()
			c.slot++
			if k == nil || k == tombstone {
				continue
			}
			out = append(out, k)
			if len(out) == n {
				if c.slot == len(t.slots) {
					c.shard, c.tab, c.slot = c.shard+1, nil, 0
				}
				return out, c.shard == indexShards
			}
		}
	}
	return out, true
}

// Range calls f with each indexed key's serial and the key, in no
// particular order, until f returns false: the shape of sync.Map.Range.
// Keys added or removed meanwhile may or may not be seen.
func (x *serialIndex) Range(f func(key, value any) bool) {
	for i := range x.shards {
		t := x.shards[i].tab.Load()
		if t == nil {
			continue
		}
		for j := range t.slots {
			k := t.slots[j].Load()
			if k == nil || k == tombstone {
				continue
			}
			if !f(k.serial, k) {
				return
			}
		}
	}
}

// coarseClock is the service's clock unless WithClock replaces it: like
// the kernel's ktime_get_real_seconds, which key expiry uses, it is read
// from a cached value that a ticker refreshes, because a real clock read
// costs tens of nanoseconds on virtual machines and a key lookup needs
// several. The value lags real time by at most about two ticks. It
// follows the monotonic clock from the wall time at the first read, so a
// step of the wall clock does not shorten or lengthen timeouts. The
// ticker runs only while the clock is being read: after a tick with no
// reader it stops, and the next read restarts it.
type coarseClock struct {
	now     atomic.Int64 // unix nanoseconds, valid while running
	wanted  atomic.Bool  // read since the last tick
	running atomic.Bool

	mu      sync.Mutex
	base    time.Time // wall and monotonic reading of the first start
	closed  bool
	stop    chan struct{}
	stopped chan struct{}
}

// coarseTick is how often a running coarse clock is refreshed.
const coarseTick = time.Millisecond

func (c *coarseClock) read() int64 {
	if c.running.Load() {
		if !c.wanted.Load() {
			c.wanted.Store(true)
		}
		return c.now.Load()
	}
	return c.start()
}

// precise reads the underlying clock. Called with mu held.
func (c *coarseClock) precise() int64 {
	if c.base.IsZero() {
		c.base = time.Now()
	}
	return c.base.UnixNano() + int64(time.Since(c.base))
}

func (c *coarseClock) start() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.precise()
	if c.closed {
		return now
	}
	if now > c.now.Load() {
		c.now.Store(now)
	}
	c.wanted.Store(true)
	if !c.running.Load() {
		if c.stopped != nil {
			<-c.stopped // the previous ticker has decided to exit
		}
		c.stop, c.stopped = make(chan struct{}), make(chan struct{})
		c.running.Store(true)
		go c.tick(c.stop, c.stopped)
	}
	return c.now.Load()
}

func (c *coarseClock) tick(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		if !c.wanted.Swap(false) || c.closed {
			c.running.Store(false)
			c.mu.Unlock()
			return
		}
		c.now.Store(c.precise())
		c.mu.Unlock()
	}
}

// close stops the ticker for good; later reads use the clock directly.
func (c *coarseClock) close() {
	c.mu.Lock()
	c.closed = true
	running, stop, stopped := c.running.Load(), c.stop, c.stopped
	c.running.Store(false)
	c.mu.Unlock()
	if running {
		close(stop)
	}
	if stopped != nil {
		<-stopped
	}
}
