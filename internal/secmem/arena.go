package secmem

import (
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The arena: chunks of size classes carved from slabs of one reserved
// region of address space, outside Go's heap. Go's collector neither
// scans nor moves it (nothing in it may point into Go's heap), and its
// memory is freed only by Free, which wipes it. Slabs are mapped as they
// are needed, never dumped, locked while the memory lock limit allows,
// and never given back: a slab keeps its chunks for the next payload of
// its class, as the kernel's slab caches keep theirs.

// slabSize is the unit the region is mapped in: every class's chunks
// are carved from slabs of this size, and an allocation larger than the
// largest class takes whole slabs of its own.
const slabSize = 64 << 10

// classes are the chunk sizes: 16 bytes apart up to 128, then four to
// each doubling, up to a slab (at most a quarter wasted, mostly an
// eighth).
var classes = func() []int {
	var c []int
	for n := 16; n <= 128; n += 16 {
		c = append(c, n)
	}
	for base := 128; base < slabSize; base *= 2 {
		for i := 1; i <= 4; i++ {
			c = append(c, base+i*base/4)
		}
	}
	return c
}()

// class is one size class: its free chunks, linked through their first
// word (an address, not a Go pointer).
type class struct {
	mu   sync.Mutex
	size uintptr
	free unsafe.Pointer // first free chunk, nil if none
	// carve is the next never-used chunk of the class's newest slab, and
	// left the bytes after it in that slab.
	carve unsafe.Pointer
	left  uintptr
}

// arena is the one region and its bookkeeping.
type arena struct {
	once    sync.Once
	base    unsafe.Pointer // nil if the region could not be reserved
	size    uintptr
	classes []class
	mu      sync.Mutex // guards next, large, idle
	next    uintptr    // the offset of the first slab never mapped
	large   map[uintptr]uintptr
	idle    map[uintptr][]uintptr // freed large runs by length, for reuse
	// slabOf is the class index + 1 of each slab of the region (0: part
	// of a large allocation, or not mapped yet). Written once, before
	// the slab's first chunk is handed out.
	slabOf   []uint8
	locking  atomic.Bool
	limit    int64 // RLIMIT_MEMLOCK when the region was made
	mapped   atomic.Int64
	locked   atomic.Int64
	inUse    atomic.Int64
	outside  atomic.Int64 // bytes Alloc gave from Go's heap instead
	lockFail atomic.Int64 // slabs mlock refused
}

var the arena

func init() { the.locking.Store(true) }

// SetArenaLocking says whether slabs mapped from now on are locked
// (true, the default) or not.
func SetArenaLocking(on bool) { the.locking.Store(on) }

func (a *arena) init() {
	a.once.Do(func() {
		a.classes = make([]class, len(classes))
		for i, n := range classes {
			a.classes[i].size = uintptr(n)
		}
		a.large = map[uintptr]uintptr{}
		a.idle = map[uintptr][]uintptr{}
		a.limit = memlockLimit()
		a.base, a.size = reserve()
		a.slabOf = make([]uint8, a.size/slabSize)
	})
}

// classFor returns the index of the smallest class that holds n bytes,
// or -1 if none does.
func classFor(n int) int {
	if n <= 128 {
		return (n+15)/16 - 1
	}
	i := sort.SearchInts(classes, n)
	if i == len(classes) {
		return -1
	}
	return i
}

// Alloc returns n bytes of zeroed memory, in the arena if it has room
// (len and cap n), or else from Go's heap (counted in Stats.Outside).
// Free it with [Free], which wipes it; n must be at least 1.
func Alloc(n int) []byte {
	a := &the
	a.init()
	if a.base != nil {
		if p := a.alloc(n); p != nil {
			a.inUse.Add(int64(n))
			return unsafe.Slice((*byte)(p), n)
		}
	}
	a.outside.Add(int64(n))
	// Words, so that what is made in it is aligned as in the arena.
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// Free wipes b, which [Alloc] returned (with the same start and length),
// and gives its memory back for the next Alloc. Nothing may use b after.
func Free(b []byte) {
	if len(b) == 0 {
		return
	}
	a := &the
	a.init()
	p := unsafe.Pointer(unsafe.SliceData(b))
	off := uintptr(p) - uintptr(a.base)
	if a.base == nil || uintptr(p) < uintptr(a.base) || off >= a.size {
		clear(b)
		return
	}
	a.inUse.Add(-int64(len(b)))
	a.free(p, off)
}

func (a *arena) alloc(n int) unsafe.Pointer {
	ci := classFor(n)
	if ci < 0 {
		return a.allocLarge(uintptr(n))
	}
	c := &a.classes[ci]
	c.mu.Lock()
	p := c.free
	if p != nil {
		c.free = *(*unsafe.Pointer)(p)
		*(*unsafe.Pointer)(p) = nil
		c.mu.Unlock()
		return p
	}
	if c.left < c.size {
		s := a.mapSlabs(1, uint8(ci+1))
		if s == nil {
			c.mu.Unlock()
			return nil
		}
		c.carve, c.left = s, slabSize
	}
	p = c.carve
	c.carve, c.left = unsafe.Add(c.carve, c.size), c.left-c.size
	c.mu.Unlock()
	return p
}

func (a *arena) free(p unsafe.Pointer, off uintptr) {
	ci := int(a.slabOf[off/slabSize]) - 1
	if ci < 0 {
		a.freeLarge(p)
		return
	}
	c := &a.classes[ci]
	clear(unsafe.Slice((*byte)(p), c.size))
	c.mu.Lock()
	*(*unsafe.Pointer)(p) = c.free
	c.free = p
	c.mu.Unlock()
}

func (a *arena) allocLarge(n uintptr) unsafe.Pointer {
	slabs := (n + slabSize - 1) / slabSize
	a.mu.Lock()
	if runs := a.idle[slabs]; len(runs) > 0 {
		off := runs[len(runs)-1]
		a.idle[slabs] = runs[:len(runs)-1]
		a.large[off] = slabs
		a.mu.Unlock()
		return unsafe.Add(a.base, off)
	}
	a.mu.Unlock()
	p := a.mapSlabs(slabs, 0)
	if p != nil {
		a.mu.Lock()
		a.large[uintptr(p)-uintptr(a.base)] = slabs
		a.mu.Unlock()
	}
	return p
}

func (a *arena) freeLarge(p unsafe.Pointer) {
	off := uintptr(p) - uintptr(a.base)
	a.mu.Lock()
	slabs, ok := a.large[off]
	if !ok {
		a.mu.Unlock()
		panic("secmem: Free of memory Alloc did not return")
	}
	delete(a.large, off)
	a.mu.Unlock()
	clear(unsafe.Slice((*byte)(p), slabs*slabSize))
	a.mu.Lock()
	a.idle[slabs] = append(a.idle[slabs], off)
	a.mu.Unlock()
}

// mapSlabs makes the next n slabs of the region usable, marked as of
// class tag (0: one large allocation), and locks them if it may.
func (a *arena) mapSlabs(n uintptr, tag uint8) unsafe.Pointer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next+n*slabSize > a.size {
		return nil
	}
	p := unsafe.Add(a.base, a.next)
	if !mapRW(p, n*slabSize) {
		return nil
	}
	first := a.next / slabSize
	for i := range n {
		a.slabOf[first+i] = tag
	}
	a.next += n * slabSize
	a.mapped.Add(int64(n * slabSize))
	switch {
	case LockedAll():
		// mlockall's MCL_FUTURE locks it as it is touched.
	case a.locking.Load() && lockRange(p, n*slabSize):
		a.locked.Add(int64(n * slabSize))
	default:
		a.lockFail.Add(int64(n * slabSize))
	}
	return p
}

// ArenaStats is what the arena holds and how much of it is locked.
type ArenaStats struct {
	// LockedAll: the whole process is locked (LockAll), arena or not.
	LockedAll bool
	// Limit is RLIMIT_MEMLOCK (-1: unlimited).
	Limit int64
	// Mapped bytes of slabs, Locked of them by the arena's own mlock,
	// Unlocked of them (the limit reached, or locking off).
	Mapped, Locked, Unlocked int64
	// InUse bytes handed out and not freed.
	InUse int64
	// Outside bytes handed out from Go's heap instead since the start
	// (no arena on this system, or its region full).
	Outside int64
}

// Stats returns the arena's figures.
func Stats() ArenaStats {
	a := &the
	a.init()
	return ArenaStats{LockedAll: LockedAll(), Limit: a.limit, Mapped: a.mapped.Load(), Locked: a.locked.Load(),
		Unlocked: a.lockFail.Load(), InUse: a.inUse.Load(), Outside: a.outside.Load()}
}

// Contains says whether p points into the arena.
func Contains(p unsafe.Pointer) bool {
	a := &the
	a.init()
	return a.base != nil && uintptr(p) >= uintptr(a.base) && uintptr(p)-uintptr(a.base) < a.size
}
