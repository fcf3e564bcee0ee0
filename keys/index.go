package keys

import (
	"iter"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Keys returns the number of keys in the serial index.
func (s *Service) Keys() int { return int(s.count.Load()) }

// lookup finds a live key by serial. It takes no lock.
func (s *Service) lookup(id Serial) *Key { return s.index.load(id) }

// LookupKey returns the key id, whoever owns it and whatever its
// permissions, with a reference the caller drops ([Key.Put]); [ENOKEY] if
// there is none. It is the kernel's key_lookup, for a type's code that
// names keys by serial (a restriction key_or_keyring:ID); a caller's
// operations check permissions instead.
func (s *Service) LookupKey(id Serial) (*Key, error) {
	sec := s.dom.Read()
	defer sec.End()
	k := s.lookup(id)
	if k == nil || !k.tryGet() {
		return nil, ENOKEY
	}
	return k, nil
}

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

// serialIndex maps serials to keys, the kernel's key_serial_tree. Readers
// take no lock: the index is split into 256 shards by a hash of the
// serial, each an open-addressed table probed linearly, whose slots hold
// the keys' positions in the registry (keyRegistry), not pointers.
// Writers (allocation, removal) hold their shard's mutex and store into
// the current table; a table that fills up is rebuilt at its new size and
// published with one atomic store, which stalls only that shard's
// writers, for a 256th of the index (one that empties, by the shrinker,
// see below). A reader
// still probing a table that was replaced sees the keys it held then;
// callers vet what they find with tryGet, as they would a key whose last
// reference is dropped after the lookup.
//
// Compared with a sync.Map it allocates nothing per key (a slot costs 8
// bytes, a position and a serial, and a key 8 more in the registry) and
// a lookup boxes nothing.
type serialIndex struct {
	shards [indexShards]indexShard
	// reg holds the keys themselves, in the order they were indexed; the
	// tables hold positions in it (see keyRegistry).
	reg keyRegistry

	// Shrinking a table that has emptied is left to a goroutine of its
	// own (shrinker), started when a removal finds one due: the removal
	// is most often the collector's, and a new table allocated in its
	// work item while Go's collector marks would charge the item a mark
	// assist, which every item queued behind it would wait for. shrinkDue
	// has a bit for each shard waiting; mu guards running and closed.
	shrinkDue [indexShards / 64]atomic.Uint64
	mu        sync.Mutex
	running   bool
	closed    bool
	shrinking sync.WaitGroup
}

const (
	indexShardBits = 8
	indexShards    = 1 << indexShardBits
	indexMinSlots  = 16
)

type indexShard struct {
	mu  sync.Mutex
	tab atomic.Pointer[indexTable]
	// free holds registry positions this shard's removals freed, for its
	// next insertions. Guarded by mu.
	free []uint32
	_    [64 - 40]byte // one cache line per shard
}

// indexTable is one version of a shard's table: a power-of-two number of
// slots, each slotFree (ends a probe), slotRemoved (probes go on) or a
// key's position in the registry, plus one.
type indexTable struct {
	slots []atomic.Uint32
	bits  uint
	// Guarded by the shard's mu. serials holds the serial of the key in
	// each slot, for writers: probing and rebuilding a table then reads
	// two arrays in order instead of every key it passes, each a cache
	// miss in a large index (a mass reap crosses every shard's threshold
	// at once, so every rebuild counts).
	serials []Serial
	used    int // slots not nil
	live    int // slots holding keys
}

// The values of a table's slot that are not a position.
const (
	slotFree    = 0
	slotRemoved = math.MaxUint32
)

func serialHash(id Serial) uint64 { return uint64(uint32(id)) * 0x9e3779b97f4a7c15 }

// shardOf is the shard that serial hash h falls in.
func shardOf(h uint64) int { return int(h >> (64 - indexShardBits)) }

func (x *serialIndex) shard(h uint64) *indexShard { return &x.shards[shardOf(h)] }

// home is the first slot a probe for hash h looks at.
func (t *indexTable) home(h uint64) uint64 { return (h << indexShardBits) >> (64 - t.bits) }

func (x *serialIndex) load(id Serial) *Key {
	_, k := x.probe(id)
	return k
}

// position returns k's position in the registry, false if k is not
// indexed.
func (x *serialIndex) position(k *Key) (uint32, bool) {
	pos, found := x.probe(k.serial)
	return pos, found == k && k != nil
}

// probe finds the key of serial id, and its position, without a lock.
func (x *serialIndex) probe(id Serial) (uint32, *Key) {
	h := serialHash(id)
	t := x.shard(h).tab.Load()
	if t == nil {
		return 0, nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		v := t.slots[i].Load()
		if v == slotFree {
			return 0, nil
		}
		if v == slotRemoved {
			continue
		}
		// A position freed and handed to another key since the slot was
		// read holds a key of another serial, or none.
		if k := x.reg.get(v - 1); k != nil && k.serial == id {
			return v - 1, k
		}
	}
}

// insert gives k the first serial from id upward that is free (wrapping
// from 2^31-1 to 3) and stores it.
func (x *serialIndex) insert(k *Key, id Serial) {
	for {
		h := x.shard(serialHash(id))
		h.mu.Lock()
		if _, ok := h.insertLocked(&x.reg, k, id); ok {
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

// insertExact stores k under id, and reports false (storing nothing) if
// id is taken.
func (x *serialIndex) insertExact(k *Key, id Serial) (pos uint32, ok bool) {
	sh := x.shard(serialHash(id))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.insertLocked(&x.reg, k, id)
}

// insertLocked stores k under id unless id is taken, and returns its
// position in the registry.
func (sh *indexShard) insertLocked(reg *keyRegistry, k *Key, id Serial) (uint32, bool) {
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
		v := t.slots[i].Load()
		if v == slotFree {
			if free < 0 {
				free = int(i)
				t.used++
			}
			break
		}
		if v == slotRemoved {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		if t.serials[i] == id {
			return 0, false
		}
	}
	k.serial = id // before the stores that publish k
	pos := reg.add(k, &sh.free)
	t.serials[free] = id
	t.slots[free].Store(pos + 1)
	t.live++
	return pos, true
}

// reserve sizes every shard's table for n more keys spread evenly, so
// that a restore (Import) inserting n keys rebuilds no table on the way.
func (x *serialIndex) reserve(n int) {
	per := n/indexShards + 1
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		live := 0
		if t != nil {
			live = t.live
		}
		if want := 2 * (live + per + per/8); t == nil || 4*(t.used+per+per/8) > 3*len(t.slots) {
			sh.rebuild(t, want)
		}
		sh.mu.Unlock()
	}
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
		v := t.slots[i].Load()
		if v == slotFree {
			return false
		}
		if v != slotRemoved && t.serials[i] == k.serial && x.reg.get(v-1) == k {
			t.slots[i].Store(slotRemoved)
			t.live--
			x.reg.remove(v-1, &sh.free)
			break
		}
	}
	if i := shardOf(h); t.tooEmpty(i) {
		x.wantShrink(i)
	}
	return true
}

// wantShrink marks shard i's table as due to shrink, and starts the
// shrinker if it is not running.
func (x *serialIndex) wantShrink(i int) {
	bit := uint64(1) << (i % 64)
	if x.shrinkDue[i/64].Or(bit)&bit != 0 {
		return // marked already
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.running || x.closed {
		return
	}
	x.running = true
	x.shrinking.Add(1)
	go x.shrinker()
}

// shrinker rebuilds the tables marked due until none is. The mark is
// set before wantShrink takes mu, and the shrinker looks for marks
// under mu before it stops, so no mark is left without a shrinker.
func (x *serialIndex) shrinker() {
	defer x.shrinking.Done()
	for {
		for w := range x.shrinkDue {
			for m := x.shrinkDue[w].Swap(0); m != 0; m &= m - 1 {
				x.shrink(w*64 + bits.TrailingZeros64(m))
			}
		}
		x.mu.Lock()
		idle := true
		for w := range x.shrinkDue {
			idle = idle && x.shrinkDue[w].Load() == 0
		}
		if idle || x.closed {
			x.running = false
			x.mu.Unlock()
			return
		}
		x.mu.Unlock()
	}
}

// shrink rebuilds shard i's table smaller if it is still mostly empty.
// The new arrays are allocated before the shard's lock is taken, so that
// whatever Go's collector charges the allocation, the shard's writers do
// not wait for it; only the copy happens under the lock.
func (x *serialIndex) shrink(i int) {
	sh := &x.shards[i]
	sh.mu.Lock()
	t := sh.tab.Load()
	if t == nil || !t.tooEmpty(i) {
		sh.mu.Unlock()
		return
	}
	want := 2 * t.live
	sh.mu.Unlock()
	fresh := newIndexTable(want)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.tab.Load() != t || 4*t.live > 3*len(fresh.slots) {
		// Rebuilt or refilled meanwhile: the next removal that finds the
		// table too empty marks it again.
		return
	}
	sh.rebuildInto(t, fresh)
}

// close stops the shrinking of tables and waits for the shrinker.
func (x *serialIndex) close() {
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.shrinking.Wait()
}

// shrinkFactor is how empty a shard's table gets before it is rebuilt
// smaller: when fewer than one slot in 8 to 15 holds a key, the fraction
// depending on the shard. Keys spread evenly over the shards, so with one
// fraction for all, a mass reap would empty every shard past it within a
// few thousand removals, and the collector's work item that made them
// would rebuild dozens of tables, several times an item's usual CPU.
func shrinkFactor(shard int) int { return 8 + shard>>5 }

// tooEmpty reports whether t, shard's table, is due to shrink.
func (t *indexTable) tooEmpty(shard int) bool {
	return len(t.slots) > indexMinSlots && shrinkFactor(shard)*t.live < len(t.slots)
}

// rebuild publishes a table of at least want slots (at least twice the
// live keys) holding old's keys. Called with the shard's mu held.
func (sh *indexShard) rebuild(old *indexTable, want int) *indexTable {
	return sh.rebuildInto(old, newIndexTable(want))
}

// newIndexTable returns an empty table of at least want slots.
func newIndexTable(want int) *indexTable {
	b := uint(4)
	for 1<<b < want || 1<<b < indexMinSlots {
		b++
	}
	t := &indexTable{slots: make([]atomic.Uint32, 1<<b), serials: make([]Serial, 1<<b), bits: b}
	// A large table is fresh memory from the system, which a probe's
	// first read would map to the shared zero page and the insertion
	// after it fault in again, copying it and flushing every processor's
	// TLB: half the faults of a restore's index, and the costlier ones.
	// One write a page faults each in once.
	for i := 0; i < len(t.slots); i += pageWords {
		t.slots[i].Store(slotFree)
		t.serials[i] = 0
	}
	return t
}

// pageWords is how many 4-byte words a page of 4 KiB holds (the smallest
// page of the systems ukeys runs on).
const pageWords = 4096 / 4

// rebuildInto fills t, empty and large enough, with old's keys and
// publishes it. Called with the shard's mu held.
func (sh *indexShard) rebuildInto(old, t *indexTable) *indexTable {
	if old != nil {
		mask := uint64(len(t.slots) - 1)
		for i := range old.slots {
			v := old.slots[i].Load()
			if v == slotFree || v == slotRemoved {
				continue
			}
			id := old.serials[i]
			j := t.home(serialHash(id))
			for t.slots[j].Load() != slotFree {
				j = (j + 1) & mask
			}
			t.serials[j] = id
			t.slots[j].Store(v)
			t.used++
			t.live++
		}
	}
	sh.tab.Store(t)
	return t
}

// indexCursor is a place in a scan of the index: the collector's, which
// resumes from it item after item while keys come and go. It is a
// position in the registry.
type indexCursor struct {
	pos uint32
	// visited counts the positions the scans from this cursor walked,
	// holding a key or not, for the caller to charge and reset.
	visited int
}

// scan appends to out up to n keys from the cursor on, advancing it, and
// reports whether the scan has passed the last position. It walks the
// registry, in the order the keys were indexed: a key stays at its
// position while it is indexed, so every key indexed for the whole of a
// scan is returned once. Keys added or removed during the scan may or may
// not be returned (a new key may take a position the scan has passed), as
// with the kernel's walk of its serial tree.
//
// A call visits at most 16n positions, so that the free positions a mass
// removal leaves behind do not make one chunk of a scan unbounded.
func (x *serialIndex) scan(c *indexCursor, n int, out []*Key) ([]*Key, bool) {
	end := x.reg.end()
	visits := 16 * max(n, 1)
	if n > math.MaxInt/16 {
		visits = math.MaxInt
	}
	for ; c.pos < end; c.pos++ {
		if len(out) == n || visits == 0 {
			return out, false
		}
		visits--
		c.visited++
		if k := x.reg.get(c.pos); k != nil {
			out = append(out, k)
		}
	}
	return out, true
}

// all yields every indexed key, in no particular order. Keys added or
// removed meanwhile may or may not be seen. Unlike scan it keeps no
// cursor: it is for checks and views that walk the index in one go.
func (x *serialIndex) all() iter.Seq[*Key] {
	return func(yield func(*Key) bool) {
		end := x.reg.end()
		for pos := range end {
			if k := x.reg.get(pos); k != nil && !yield(k) {
				return
			}
		}
	}
}
