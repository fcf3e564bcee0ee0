package rcu

import (
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname

	"github.com/ukeys/ukeys/internal/goroutine"
	"github.com/ukeys/ukeys/internal/invariants"
)

// Read sections are counted in per-processor shards, each holding two
// counters: one for sections that began in the current epoch and one for
// the previous epoch. A grace period flips the epoch and waits for the old
// epoch's counters to drain, so a steady stream of new readers can never
// hold it back (they count against the new epoch). Because a section ends on
// the same counter it began on, every counter is non-negative and a shard
// scan that finds each counter at zero at the moment it looked proves that
// every section begun before the flip has ended.

// shard is padded to two cache lines so that processors do not share one
// (the adjacent-line prefetcher pulls lines in pairs).
type shard struct {
	n [2]atomic.Int64
	_ [128 - 16]byte
}

// procPin returns the id of the processor (P) running the caller and pins
// the goroutine to it until procUnpin. The runtime keeps this symbol
// reachable for exactly this kind of per-P sharding (see go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// Section is an open read section. Obtain one with [Domain.Read] and end it
// with [Section.End] exactly once. A Section is a small value: keep it in a
// local variable (defer s.End() is the usual shape).
type Section struct {
	ctr *atomic.Int64
	d   *Domain
	idx uint32
	gid int64 // owner goroutine, tracked only when invariants are on
}

// Read begins a read section. Any goroutine may open one, sections may
// nest, and a section may block (on I/O, locks, channels). A grace period
// that starts after Read returns does not complete until the section ends.
//
// Objects reached through rcu-protected pointers inside the section stay
// valid until [Section.End]: their reclamation ([Domain.Call] callbacks,
// code after [Domain.Synchronize]) waits for it.
func (d *Domain) Read() Section {
	p := procPin()
	procUnpin()
	idx := d.epoch.Load() & 1
	c := &d.shards[uint(p)&d.shardMask].n[idx]
	c.Add(1)
	s := Section{ctr: c, d: d, idx: idx}
	if invariants.Enabled {
		s.gid = d.trackSection(1)
	}
	return s
}

// End ends the section. Ending a section twice, or ending a zero [Section],
// panics.
func (s *Section) End() {
	c := s.ctr
	if c == nil {
		panic("rcu: Section.End called twice or on a Section not returned by Read")
	}
	s.ctr = nil
	n := c.Add(-1)
	if invariants.Enabled {
		s.d.untrackSection(s.gid, n)
	}
	if n == 0 && s.d.waitIdx.Load() == s.idx+1 {
		s.d.wake()
	}
}

// sectionsIn reports how many sections counted against epoch index idx
// are open. The sum is exact only when no section of that index begins or
// ends during the scan; it is used for zero tests and for reports.
func (d *Domain) sectionsIn(idx uint32) int64 {
	var sum int64
	for i := range d.shards {
		sum += d.shards[i].n[idx].Load()
	}
	return sum
}

// drained reports whether every section counted against idx has ended.
func (d *Domain) drained(idx uint32) bool {
	for i := range d.shards {
		if d.shards[i].n[idx].Load() != 0 {
			return false
		}
	}
	return true
}

// shardCount picks a power of two comfortably above the number of
// processors, so that sections that migrate still rarely share a line.
func shardCount() int {
	n := 8
	for n < 2*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	return n
}

// trackSection records that the calling goroutine holds one more section,
// so that Synchronize and Barrier can refuse to run inside one.
func (d *Domain) trackSection(delta int) int64 {
	gid := goroutine.ID()
	d.ownersMu.Lock()
	d.owners[gid] += delta
	if d.owners[gid] == 0 {
		delete(d.owners, gid)
	}
	d.ownersMu.Unlock()
	return gid
}

func (d *Domain) untrackSection(gid int64, n int64) {
	if n < 0 {
		panic("rcu: read-section counter went negative: a Section was copied and ended twice")
	}
	d.ownersMu.Lock()
	d.owners[gid]--
	if d.owners[gid] <= 0 {
		delete(d.owners, gid)
	}
	d.ownersMu.Unlock()
}

// checkBlockingAllowed panics if the calling goroutine is inside a read
// section of d or is one of d's online tasks: a grace period would wait for
// the caller itself, forever. The check runs only when invariants are on,
// because learning the caller's goroutine costs a microsecond.
func (d *Domain) checkBlockingAllowed(op string) {
	if !invariants.Enabled {
		return
	}
	gid := goroutine.ID()
	d.ownersMu.Lock()
	held := d.owners[gid]
	d.ownersMu.Unlock()
	if held > 0 {
		panic("rcu: " + op + " called inside a read section of the same domain (" + d.cfg.name + "): it would wait for itself")
	}
	if t := d.onlineTask(gid); t != nil {
		panic("rcu: " + op + " called by online task " + t.name + " of domain " + d.cfg.name + ": call Offline first, or it waits for itself")
	}
}
