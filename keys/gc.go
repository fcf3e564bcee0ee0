package keys

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/invariants"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// DefaultChunkSize is how many keys one collector work item scans or
// destroys at most (the kernel's KEY_GC_CHUNK_SIZE).
const DefaultChunkSize = 1024

// ReapReason is why the collector reaps a key: why it prunes the links
// to it, and so why the key may lose its last reference. [GCStats.Pruned]
// counts links by it.
type ReapReason int

// Reasons a key is reaped. The constants are untyped so that they also
// fit where a plain int is wanted (tables of metric labels, say); the
// collector itself passes a [ReapReason].
const (
	ReapUnused      = iota // no reference left: not a pruning reason
	ReapExpired            // its expiry and gc_delay have passed
	ReapRevoked            // revoked, and gc_delay has passed
	ReapInvalidated        // invalidated: reaped at once
	ReapDead               // of an unregistered type: reaped at once
	reapReasons
)

var reapNames = [reapReasons]string{"unused", "expired", "revoked", "invalidated", "dead_type"}

// String names the reason as the daemon's metrics label it.
func (r ReapReason) String() string {
	if r >= 0 && r < reapReasons {
		return reapNames[r]
	}
	return fmt.Sprintf("ReapReason(%d)", int(r))
}

// GCStats are the collector's counters.
type GCStats struct {
	// Passes counts complete scans of the serial index; Items the work
	// items run; Scanned the keys examined.
	Passes, Items, Scanned uint64
	// Pruned counts links to dead keys removed, by reason (ReapExpired,
	// ReapRevoked, ReapInvalidated, ReapDead); Destroyed the keys destroyed.
	Pruned    [reapReasons]uint64
	Destroyed uint64
	// MaxScannedPerItem and MaxDestroyedPerItem are the most keys one work
	// item scanned or destroyed: never more than the chunk size.
	MaxScannedPerItem, MaxDestroyedPerItem int
	// ItemTime summarises how long work items ran (wall time, including
	// any time the worker was descheduled); ItemCPU the CPU time each
	// spent (with WithGCTuning's ItemCPUTime, on Linux; empty otherwise);
	// DeathToDestruction how long keys waited between losing their last
	// reference and being destroyed.
	ItemTime, ItemCPU, DeathToDestruction rcu.Latency
	// Sweeps counts keyrings swept whole (the kernel's keyring_gc, in
	// steps) because many of their links died at once; SweptLinks the links
	// those sweeps visited.
	Sweeps, SweptLinks uint64
	// MaxWorkPerItem is the most work one item did, in the units its
	// budget counts: keys examined, links visited or pruned, keys
	// destroyed. At most the chunk size, plus one.
	MaxWorkPerItem int
	// ChunkSize is the bound in force (0: unbounded).
	ChunkSize int
}

// typeReapStage is how far the collector has got with the keys of a type
// being unregistered (the kernel's KEY_GC_REAPING_DEAD_1 to _3). Each
// stage is one full pass; every pass of the three prunes links to the
// type's keys.
type typeReapStage uint8

const (
	typeReapNone   typeReapStage = iota // no type is being unregistered
	typeReapMark                        // mark the type's keys dead and take their permissions
	typeReapUnlink                      // prune links that appeared while the marking pass ran
	typeReapKill                        // keys still referenced lose their payloads
)

// collector is the key garbage collector: a work item that scans the
// serial index a chunk at a time from a saved cursor, prunes links to dead
// keys, and destroys unused keys a chunk at a time after a grace period.
// It never holds a lock across chunks.
type collector struct {
	s     *Service
	wq    *workqueue.Queue
	ownWQ bool
	work  *workqueue.Work
	timer *workqueue.Work
	// relTimer kicks the item when a queued release becomes due.
	relTimer *workqueue.Work
	chunk    int

	// mu guards what the rest of the service asks of the work item: keys
	// buried, passes owed, the timer's next run, the type being
	// unregistered (its stage, and a channel closed when it is done).
	mu            sync.Mutex
	graveyard     graves
	reapRequested bool // the kernel's KEY_GC_REAP_REQUESTED: a full pass is owed
	linksPending  bool // the kernel's KEY_GC_KEY_EXPIRED: links need pruning
	nextRun       int64
	deadType      *Type
	deadStage     typeReapStage
	deadDone      chan struct{}
	// releases are keyrings' detached links whose references the
	// collector drops a chunk at a time (gc_release.go).
	releases []*release
	// puts are the references of links removed one at a time, with when
	// (graveEntry.died, monoNow's time), that the collector drops once
	// releaseDelay has passed (gc_release.go); flushBefore makes those
	// queued until then due at once (WaitGC).
	puts        graves
	flushBefore int64
	// spare holds emptied blocks of graves for reuse (recycle).
	spare [][]graveEntry
	// closed is set by close before it cancels the item: from then on
	// nothing schedules the item or arms the timer again (kick checks it
	// under mu), so that no item of a collector whose queue outlives it
	// (a shared queue) runs beside close's final sweep.
	closed bool

	// The phases' state, owned by the work item, which never runs
	// concurrently with itself: a pass scans the index (scan), prunes the
	// links to the dead keys it finds (prune), then destroys the keys
	// buried before it ended once a grace period has passed (destroy).
	scan    scanPass
	prune   prunePass
	destroy destroyPass

	// outstanding counts keys buried and not yet destroyed; inPass is set
	// while a scan is under way. WaitGC watches both.
	outstanding atomic.Int64
	inPass      atomic.Bool
	// releasing counts detached links whose references are not yet
	// dropped; relKeys is releaseChunk's scratch.
	releasing atomic.Int64
	relKeys   []*Key
	// dying is the scratch of the items that drop references (sweeps,
	// prunes, releases) for the keys that lost their last: a slice grown
	// afresh in each step of a million-link sweep allocated 17 MB per
	// reap, and every allocation an item makes while Go's collector
	// marks may charge the item a mark assist or a sweep of spans.
	dying []*Key

	meter gcMeter
}

// gcMeter is what GCStats reports, under its own lock: readers of the
// statistics never wait for the collector's state.
type gcMeter struct {
	mu     sync.Mutex
	stats  GCStats
	itemH  gcHist
	cpuH   gcHist
	deathH gcHist
}

func newCollector(s *Service, wq *workqueue.Queue, chunk int) *collector {
	g := &collector{s: s, wq: wq, chunk: chunk, nextRun: math.MaxInt64,
		prune: prunePass{byRing: map[*Key][]deadKey{}, fresh: freshNodes{}, sweeps: map[*Key]*ringSweep{}},
		meter: gcMeter{itemH: gcHist{highest: time.Hour}, cpuH: gcHist{highest: time.Hour}, deathH: gcHist{highest: 24 * time.Hour}}}
	if g.wq == nil {
		g.wq = workqueue.New(s.dom, workqueue.WithName("keys-gc"), workqueue.WithWorkers(1))
		g.ownWQ = true
	}
	g.work = workqueue.NewTaskWork("keys-gc", g.run)
	g.relTimer = workqueue.NewWork("keys-gc-release", g.kick)
	g.timer = workqueue.NewWork("keys-gc-timer", func() {
		g.mu.Lock()
		g.nextRun = math.MaxInt64
		g.linksPending = true
		g.reapRequested = true
		g.mu.Unlock()
		g.kick()
	})
	g.meter.stats.ChunkSize = chunk
	return g
}

// close stops the collector: the timer is cancelled, the queue drained,
// and keys still in the graveyard are destroyed now, after one last grace
// period, so that no payload outlives the service unwiped.
func (g *collector) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wq.Cancel(g.timer)
	g.wq.Cancel(g.relTimer)
	if g.ownWQ {
		g.wq.Close()
	} else {
		g.wq.Cancel(g.work)
	}
	g.closeReleases() // what they bury is destroyed at once: the service is closed
	g.mu.Lock()
	if g.deadType != nil {
		// An unregistration waits for stages no item will run now.
		g.deadType = nil
		close(g.deadDone)
	}
	rest := g.destroy.batch
	rest.moveFrom(&g.graveyard)
	g.destroy.batch = graves{}
	g.mu.Unlock()
	if rest.n == 0 {
		return
	}
	_ = g.s.dom.Synchronize(context.Background())
	for i, b := range rest.blocks {
		if i == 0 {
			b = b[rest.head:] // destroyed already
		}
		var r quotaReturns
		for _, e := range b {
			g.s.destroyInto(e.k, &r)
		}
		g.s.returnQuota(r)
		g.outstanding.Add(-int64(len(b)))
	}
}

// WaitGC waits until every payload retired so far has been wiped and the
// collector has destroyed every key that has lost its last reference (and
// those their destruction released), or ctx ends. Tests and benchmarks use it to observe quota returned.
func (s *Service) WaitGC(ctx context.Context) error {
	g := s.gcol
	if err := s.dom.Barrier(ctx); err != nil { // payloads retired so far
		return err
	}
	// Links removed so far let go of their keys now, not releaseDelay
	// later.
	g.expedite()
	// Flush at least once, so that an item already running (but not yet
	// inside a pass) has finished, then until nothing is left in flight.
	for {
		if _, err := g.wq.FlushWork(ctx, g.work); err != nil {
			return err
		}
		if err := s.dom.Barrier(ctx); err != nil {
			return err
		}
		if g.outstanding.Load() == 0 && g.releasing.Load() == 0 && !g.inPass.Load() && !g.work.Pending() {
			break
		}
		if (g.outstanding.Load() > 0 || g.releasing.Load() > 0) && !g.work.Pending() {
			time.Sleep(100 * time.Microsecond) // a continuation may be queued behind a grace period
			g.expedite()                       // and links removed meanwhile
		}
	}
	return nil
}

// requestPass asks for a full pass (with link pruning if links is set).
func (g *collector) requestPass(links bool) {
	g.mu.Lock()
	g.reapRequested = true
	if links {
		g.linksPending = true
	}
	g.mu.Unlock()
	g.kick()
}

// kick schedules the work item unless the collector is closed. The check
// and the scheduling happen under mu, so that close, once it has set
// closed, knows that its Cancel leaves the item neither pending nor
// running for good. Items schedule their own continuation directly: while
// close waits for a running item, the queue refuses to requeue it.
func (g *collector) kick() {
	g.mu.Lock()
	if !g.closed {
		g.wq.Schedule(g.work)
	}
	g.mu.Unlock()
}

// scheduleAt arms the collector for a pass at unix-nanosecond time at,
// keeping the earliest of the times asked for (key_schedule_gc).
func (g *collector) scheduleAt(at int64) {
	now := g.s.now()
	if at <= now {
		g.requestPass(true)
		return
	}
	g.mu.Lock()
	if at >= g.nextRun {
		g.mu.Unlock()
		return
	}
	g.nextRun = at
	if g.s.clock != nil || g.closed {
		// A clock given by WithClock need not move with real time, so a real
		// timer would fire at a meaningless moment: whoever drives that
		// clock requests passes (RequestGC).
		g.mu.Unlock()
		return
	}
	g.wq.Reschedule(g.timer, time.Duration(at-now))
	g.mu.Unlock()
}

// run is one work item: within one budget of g.chunk units, it continues
// the pass under way (sweeps first, then the scan, then the deferred
// prunes), ends the pass when nothing of it is left, and destroys what
// the budget still allows. It reschedules itself while work remains.
func (g *collector) run(t *rcu.Task) {
	cpuOK := false
	var cpu0 time.Duration
	if g.s.itemCPU {
		// The item stays on one thread so that the thread's CPU clock
		// measures its work alone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0, cpuOK = threadCPU()
	}
	began := time.Now()
	scanned, destroyed, work := 0, 0, 0
	defer func() {
		d := time.Since(began)
		var cpu1 time.Duration
		ok := false
		if cpuOK {
			cpu1, ok = threadCPU()
		}
		g.meter.mu.Lock()
		g.meter.stats.Items++
		g.meter.itemH.record(d.Nanoseconds())
		if cpuOK && ok {
			g.meter.cpuH.record(max(int64(cpu1-cpu0), 1))
		}
		g.meter.stats.MaxScannedPerItem = max(g.meter.stats.MaxScannedPerItem, scanned)
		g.meter.stats.MaxDestroyedPerItem = max(g.meter.stats.MaxDestroyedPerItem, destroyed)
		g.meter.stats.MaxWorkPerItem = max(g.meter.stats.MaxWorkPerItem, work)
		g.meter.mu.Unlock()
	}()
	budget := g.chunk
	if budget <= 0 {
		budget = math.MaxInt
	} else if invariants.Enabled && !g.s.chunkSet && rand.IntN(4) == 0 {
		// A test's few keys fit in one item of the default budget, so
		// that the paths that stop mid-pass and resume from a saved
		// cursor would run only in the tests that set a small chunk:
		// in builds with invariants (every -race run), one item in
		// four gets a budget of a few units instead.
		budget = 1 + rand.IntN(min(budget, 16))
	}
	// Detached links first: what they bury joins this item's destroy
	// phase, and until they are dropped their keys' reverse links name
	// keyrings that no longer link them.
	if g.releasesPending() {
		// Outside a pass, what the releases bury is destroyed as they
		// go, half the budget each: the graveyard then holds a few
		// blocks, reused, instead of a million keys' worth (16 MB)
		// allocated by the items, which Go's collector would charge to
		// them as mark assists (ukeybench gc shows the items' CPU).
		interleave := !g.scan.active
		relBudget := budget
		if interleave && g.destroy.active {
			relBudget = max(budget/2, 1)
		}
		work += g.releaseChunk(t, relBudget)
		if g.releasesPending() {
			if interleave {
				if !g.destroy.active {
					g.startDestroy()
				}
				destroyed, _ = g.destroyChunk(t, max(budget-work, 0))
				work += destroyed
			}
			g.wq.Schedule(g.work)
			return
		}
	}
	if !g.destroy.active && !g.scan.active && !g.passOwed() {
		// Only burials: the buried keys are out of the index already, so
		// a scan of it (what the kernel needs to find its unused keys)
		// would find none of them. They go to the destroy phase as a pass
		// would send them.
		g.startDestroy()
	}
	if !g.destroy.active && (g.scan.active || g.passOwed()) {
		if !g.scan.active {
			g.beginPass()
		}
		// One budget for the whole item, whatever the work: sweeps under
		// way first (they unlink the most per unit), then the scan, then
		// the keys whose pruning the scan deferred.
	pass:
		for work < budget {
			switch {
			case len(g.prune.sweeping) > 0:
				work += g.sweepStep(t, budget-work)
			case len(g.scan.leftover) > 0 || !g.scan.done:
				u, n := g.scanChunk(t, budget-work)
				work += u
				scanned += n
			case len(g.prune.deferred) > 0:
				work += g.pruneDeferred(t, budget-work)
			default:
				break pass
			}
		}
		if len(g.prune.sweeping) > 0 || len(g.scan.leftover) > 0 || !g.scan.done || len(g.prune.deferred) > 0 {
			g.wq.Schedule(g.work)
			return
		}
		g.endPass()
	}
	var more bool
	destroyed, more = g.destroyChunk(t, max(budget-work, 0))
	work += destroyed
	if more {
		return // rescheduled by destroyChunk
	}
	g.mu.Lock()
	again := g.reapRequested || g.graveyard.n > 0 || g.deadStage != typeReapNone
	g.mu.Unlock()
	if again || g.releasesPending() {
		g.wq.Schedule(g.work)
		return
	}
	g.armPendingRelease()
}

// passOwed reports whether a full pass has been asked for: keys may have
// expired or been revoked, or a type is being unregistered.
func (g *collector) passOwed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reapRequested || g.deadStage != typeReapNone
}

// GCStats returns the collector's statistics.
func (s *Service) GCStats() GCStats {
	g := s.gcol
	g.meter.mu.Lock()
	defer g.meter.mu.Unlock()
	st := g.meter.stats
	st.ItemTime = g.meter.itemH.summary()
	st.ItemCPU = g.meter.cpuH.summary()
	st.DeathToDestruction = g.meter.deathH.summary()
	return st
}

// RequestGC asks the collector for a full pass now, pruning links to dead
// keys (what the kernel's timer does when an expiry is due).
func (s *Service) RequestGC() { s.gcol.requestPass(true) }
