package keys

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/latency"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// DefaultChunkSize is how many keys one collector work item scans or
// destroys at most (the kernel's KEY_GC_CHUNK_SIZE).
const DefaultChunkSize = 1024

// Reasons a key is reaped, for statistics.
const (
	ReapUnused = iota
	ReapExpired
	ReapRevoked
	ReapInvalidated
	ReapDead
	reapReasons
)

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
	// spent (with WithItemCPUTime, on Linux; empty otherwise);
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
	chunk int

	mu            sync.Mutex
	graveyard     graves
	reapRequested bool // the kernel's KEY_GC_REAP_REQUESTED: a full pass is owed
	linksPending  bool // the kernel's KEY_GC_KEY_EXPIRED: links need pruning
	nextRun       int64
	deadType      *Type
	deadStage     int
	deadDone      chan struct{}

	// Owned by the work item, which never runs concurrently with itself.
	scanning   bool
	cursor     indexCursor
	start, end int64
	reapLinks  bool
	destroying bool
	cookie     rcu.Cookie
	batch      graves
	foundDead  bool
	scratch    []*Key             // scanChunk's keys
	leftover   []*Key             // fetched, not yet examined
	scanDone   bool               // the cursor has passed the last shard
	prune      map[*Key][]deadKey // scanChunk's scratch
	fresh      freshNodes         // pruneFrom's scratch
	delay      int64              // gc_delay in force for this pass
	// This pass's large keyrings (see ringSweep), the sweeps under way in
	// the order they began, and the keyrings whose deferred dead keys are
	// still to be pruned one by one once the scan is over.
	sweeps   map[*Key]*ringSweep
	sweeping []*ringSweep
	deferred []*ringSweep
	swept    []sweptLink  // sweepStep's scratch
	quota    quotaReturns // destroyChunk's scratch

	// outstanding counts keys buried and not yet destroyed; inPass is set
	// while a scan is under way. WaitGC watches both.
	outstanding atomic.Int64
	inPass      atomic.Bool

	statsMu sync.Mutex
	stats   GCStats
	itemH   *hdrhistogram.Histogram
	cpuH    *hdrhistogram.Histogram
	deathH  *hdrhistogram.Histogram
	items   atomic.Uint64
}

type graveEntry struct {
	k    *Key
	died int64
}

// graves is a queue of buried keys in blocks of graveBlock entries: a
// million burials never copy a growing array, which, under the lock every
// burier takes, stalled the collector and the buriers alike.
type graves struct {
	blocks [][]graveEntry
	n      int
}

const graveBlock = 1024

func (q *graves) push(e graveEntry) {
	if len(q.blocks) == 0 || len(q.blocks[len(q.blocks)-1]) == graveBlock {
		q.blocks = append(q.blocks, make([]graveEntry, 0, graveBlock))
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, e)
	q.n++
}

// moveFrom appends o's entries to q and empties o.
func (q *graves) moveFrom(o *graves) {
	q.blocks = append(q.blocks, o.blocks...)
	q.n += o.n
	*o = graves{}
}

// front returns up to max entries from the head of the queue (from one
// block); drop removes that many once they are handled.
func (q *graves) front(max int) []graveEntry {
	b := q.blocks[0]
	return b[:min(max, len(b))]
}

func (q *graves) drop(k int) {
	q.blocks[0] = q.blocks[0][k:]
	q.n -= k
	if len(q.blocks[0]) == 0 {
		q.blocks[0] = nil
		q.blocks = q.blocks[1:]
	}
}

func newCollector(s *Service, wq *workqueue.Queue, chunk int) *collector {
	g := &collector{s: s, wq: wq, chunk: chunk, nextRun: math.MaxInt64,
		prune: map[*Key][]deadKey{}, fresh: freshNodes{}, sweeps: map[*Key]*ringSweep{},
		itemH: hdrhistogram.New(1, int64(time.Hour), 3), cpuH: hdrhistogram.New(1, int64(time.Hour), 3), deathH: hdrhistogram.New(1, int64(24*time.Hour), 3)}
	if g.wq == nil {
		g.wq = workqueue.New(s.dom, workqueue.WithName("keys-gc"), workqueue.WithWorkers(1))
		g.ownWQ = true
	}
	g.work = workqueue.NewTaskWork("keys-gc", g.run)
	g.timer = workqueue.NewWork("keys-gc-timer", func() {
		g.mu.Lock()
		g.nextRun = math.MaxInt64
		g.linksPending = true
		g.reapRequested = true
		g.mu.Unlock()
		g.wq.Schedule(g.work)
	})
	g.stats.ChunkSize = chunk
	return g
}

// close stops the collector: the timer is cancelled, the queue drained,
// and keys still in the graveyard are destroyed now, after one last grace
// period, so that no payload outlives the service unwiped.
func (g *collector) close() {
	g.wq.Cancel(g.timer)
	if g.ownWQ {
		g.wq.Close()
	} else {
		g.wq.Cancel(g.work)
	}
	g.mu.Lock()
	rest := g.batch
	rest.moveFrom(&g.graveyard)
	g.batch = graves{}
	g.mu.Unlock()
	if rest.n == 0 {
		return
	}
	_ = g.s.dom.Synchronize(context.Background())
	for _, b := range rest.blocks {
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
	// Flush at least once, so that an item already running (but not yet
	// inside a pass) has finished, then until nothing is left in flight.
	for {
		if _, err := g.wq.FlushWork(ctx, g.work); err != nil {
			return err
		}
		if err := s.dom.Barrier(ctx); err != nil {
			return err
		}
		if g.outstanding.Load() == 0 && !g.inPass.Load() && !g.work.Pending() {
			break
		}
		if g.outstanding.Load() > 0 && !g.work.Pending() {
			time.Sleep(100 * time.Microsecond) // a continuation may be queued behind a grace period
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
	g.wq.Schedule(g.work)
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
	g.mu.Unlock()
	if g.s.clock != nil {
		// A clock given by WithClock need not move with real time, so a real
		// timer would fire at a meaningless moment: whoever drives that
		// clock requests passes (RequestGC).
		return
	}
	g.wq.Reschedule(g.timer, time.Duration(at-now))
}

// buriedAll takes keys whose last reference went (already counted in
// outstanding by Service.unusedBatch), under one lock.
func (g *collector) buriedAll(ks []*Key) {
	now := g.s.now()
	g.mu.Lock()
	for _, k := range ks {
		g.graveyard.push(graveEntry{k: k, died: now})
	}
	g.reapRequested = true
	g.mu.Unlock()
	g.wq.Schedule(g.work)
}

// dead reports whether k's links are due for pruning at limit, and why.
func (g *collector) dead(k *Key, limit int64, delay int64) (int, bool) {
	f := k.flags.Load()
	switch {
	case f&flagInvalidated != 0:
		return ReapInvalidated, true
	case f&flagDead != 0:
		return ReapDead, true
	}
	if e := k.expiry.Load(); e != 0 && e+delay <= limit {
		if f&flagRevoked != 0 {
			return ReapRevoked, true
		}
		return ReapExpired, true
	}
	return 0, false
}

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
		g.statsMu.Lock()
		g.stats.Items++
		_ = g.itemH.RecordValue(d.Nanoseconds())
		if cpuOK && ok {
			_ = g.cpuH.RecordValue(max(int64(cpu1-cpu0), 1))
		}
		g.stats.MaxScannedPerItem = max(g.stats.MaxScannedPerItem, scanned)
		g.stats.MaxDestroyedPerItem = max(g.stats.MaxDestroyedPerItem, destroyed)
		g.stats.MaxWorkPerItem = max(g.stats.MaxWorkPerItem, work)
		g.statsMu.Unlock()
	}()
	budget := g.chunk
	if budget <= 0 {
		budget = math.MaxInt
	}
	if !g.destroying {
		if !g.scanning {
			g.beginPass()
		}
		// One budget for the whole item, whatever the work: sweeps under
		// way first (they unlink the most per unit), then the scan, then
		// the keys whose pruning the scan deferred.
	pass:
		for work < budget {
			switch {
			case len(g.sweeping) > 0:
				work += g.sweepStep(t, budget-work)
			case len(g.leftover) > 0 || !g.scanDone:
				u, n := g.scanChunk(t, budget-work)
				work += u
				scanned += n
			case len(g.deferred) > 0:
				work += g.pruneDeferred(t, budget-work)
			default:
				break pass
			}
		}
		if len(g.sweeping) > 0 || len(g.leftover) > 0 || !g.scanDone || len(g.deferred) > 0 {
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
	again := g.reapRequested || g.graveyard.n > 0 || g.deadStage > 0
	g.mu.Unlock()
	if again {
		g.wq.Schedule(g.work)
	}
}

func (g *collector) beginPass() {
	g.mu.Lock()
	g.reapRequested = false
	g.reapLinks = g.linksPending
	g.linksPending = false
	if g.deadStage > 0 {
		g.reapLinks = true
	}
	g.mu.Unlock()
	g.scanning = true
	g.inPass.Store(true)
	g.cursor = indexCursor{}
	g.leftover, g.scanDone = nil, false
	g.start = g.s.now()
	g.end = math.MaxInt64
	g.delay = int64(g.s.Tunables().GCDelay)
	g.foundDead = false
}

// linksDue reports whether this pass prunes links to keys dead for why:
// invalidated keys and keys of a dead type at once, expired and revoked
// ones when the pass was asked to.
func (g *collector) linksDue(why int) bool {
	return g.reapLinks || why == ReapInvalidated || why == ReapDead
}

// linkDead reports whether this pass prunes links to k, and why.
func (g *collector) linkDead(k *Key) (int, bool) {
	why, dead := g.dead(k, g.start, g.delay)
	if !dead || !g.linksDue(why) {
		return 0, false
	}
	return why, true
}

// addPruned adds a step's pruned links, by reason, to the statistics.
func (g *collector) addPruned(pruned *[reapReasons]uint64) {
	g.statsMu.Lock()
	for i, c := range pruned {
		g.stats.Pruned[i] += c
	}
	g.statsMu.Unlock()
}

// scanChunk examines up to budget keys after the cursor, and returns the
// units of work it spent and how many keys it examined. It holds the
// index lock only while it copies the chunk's keys.
func (g *collector) scanChunk(t *rcu.Task, budget int) (int, int) {
	// Keys fetched by an earlier item that ran out of budget come first.
	ks := g.leftover
	if len(ks) == 0 {
		ks, g.scanDone = g.s.index.scan(&g.cursor, budget, g.scratch[:0])
		g.scratch = ks
	}
	g.mu.Lock()
	deadType, stage := g.deadType, g.deadStage
	g.mu.Unlock()
	var pruned [reapReasons]uint64
	// Links to this chunk's dead keys, by keyring: each keyring is then
	// locked once and gets one new version for all of them.
	prune := g.prune
	// The budget counts keys examined plus links to prune: a chunk whose
	// keys are all dead would otherwise cost an item several times what a
	// chunk of live keys does. What the budget leaves is kept for the next
	// item.
	units, n := 0, 0
	for ; n < len(ks) && units < budget; n++ {
		k := ks[n]
		units++
		t.Quiescent()
		if deadType != nil && k.typ.Load() == deadType {
			g.foundDead = true
			switch stage {
			case 1:
				k.setFlag(flagDead)
				k.perm.Store(0)
			case 3:
				g.s.killPayload(k)
			}
		}
		if reason, isDead := g.dead(k, g.start, g.delay); isDead {
			if g.linksDue(reason) {
				k.parentsMu.Lock()
				k.eachParentLocked(func(ring *Key) {
					units += g.routeDead(ring, deadKey{k: k, why: reason})
				})
				k.parentsMu.Unlock()
			}
			continue
		}
		if e := k.expiry.Load(); e != 0 {
			if at := e + g.delay; at > g.start && at < g.end {
				g.end = at
			}
		}
	}
	for ring, dead := range prune {
		t.Quiescent()
		g.s.pruneFrom(ring, dead, &pruned, g.fresh)
		clear(g.fresh)
		delete(prune, ring)
	}
	g.addPruned(&pruned)
	g.statsMu.Lock()
	g.stats.Scanned += uint64(n)
	g.statsMu.Unlock()
	clear(ks[:n]) // no stale pointers kept alive between items
	g.leftover = ks[n:]
	return units, n
}

// Large keyrings are swept rather than pruned key by key once enough of
// their links are found dead in one pass: sweepMinLinks is the size from
// which a keyring is considered, sweepShare the share of its links (one
// in sweepShare) that must be dead. Pruning one link of a million-link
// keyring costs about as much as visiting a few hundred in a sweep.
const (
	sweepMinLinks = 1024
	sweepShare    = 64
)

// ringSweep is the collector's plan, for one pass, for one large keyring
// that links dead keys: defer them while few, sweep it once many.
type ringSweep struct {
	ring    *Key
	state   int
	pending []deadKey // while deferring: dead keys to prune one by one
	cursor  uint64    // while sweeping: where the next step resumes
}

const (
	sweepDeferring = iota
	sweepActive
	sweepDone
)

// routeDead decides how ring's link to the dead key d goes, and returns
// what that costs the item's budget now: pruned with this chunk (small
// keyrings, and links a sweep has passed), deferred (a large keyring,
// while few of its links are known dead), or left to the keyring's sweep.
func (g *collector) routeDead(ring *Key, d deadKey) int {
	st := g.sweeps[ring]
	if st == nil {
		if snap := ring.ring.Load(); snap == nil || snap.n < sweepMinLinks {
			g.prune[ring] = append(g.prune[ring], d)
			return 1
		}
		st = &ringSweep{ring: ring}
		g.sweeps[ring] = st
		g.deferred = append(g.deferred, st)
	}
	switch st.state {
	case sweepDeferring:
		st.pending = append(st.pending, d)
		if snap := ring.ring.Load(); snap == nil || len(st.pending)*sweepShare >= snap.n {
			// The sweep's first step starts at the beginning: it meets
			// every key deferred so far.
			st.state, st.pending = sweepActive, nil
			g.sweeping = append(g.sweeping, st)
		}
		return 0
	case sweepActive:
		if trieOrder(d.k.hash) >= st.cursor {
			return 0 // the sweep has yet to reach it
		}
	}
	g.prune[ring] = append(g.prune[ring], d)
	return 1
}

// sweepStep runs one step of the first sweep under way, spending at most
// budget units (see sweepWalk), and returns what it spent.
func (g *collector) sweepStep(t *rcu.Task, budget int) int {
	st := g.sweeping[0]
	ring := st.ring
	w := sweepWalk{dead: g.linkDead, tick: t.Quiescent, budget: budget, removed: g.swept[:0]}
	ring.mu.Lock()
	if snap := ring.ring.Load(); snap != nil && snap.n > 0 {
		if next := snap.sweep(st.cursor, &w); next != snap {
			ring.ring.Store(next)
			g.s.chargeLink(ring, -linkCost*len(w.removed))
		}
	}
	ring.mu.Unlock()
	if w.stopped {
		st.cursor = w.next
	} else {
		st.state = sweepDone
		g.sweeping[0] = nil
		g.sweeping = g.sweeping[1:]
	}
	var pruned [reapReasons]uint64
	var dying []*Key
	for _, r := range w.removed {
		t.Quiescent()
		r.l.key.removeParent(ring)
		pruned[r.why]++
		if r.l.key.putLast() {
			dying = append(dying, r.l.key)
		}
	}
	g.bury(t, dying)
	g.addPruned(&pruned)
	g.statsMu.Lock()
	g.stats.SweptLinks += uint64(w.used - len(w.removed))
	if !w.stopped {
		g.stats.Sweeps++
	}
	g.statsMu.Unlock()
	clear(w.removed)
	g.swept = w.removed[:0]
	return max(w.used, 1)
}

// bury hands keys that lost their last reference to the graveyard a
// thousand at a time, reporting a quiescent state between batches: an
// unbounded item (chunk size 0) sweeping a million-link keyring buries a
// million at once, and a loop that long without one holds every grace
// period, and with it every caller of rcu.Call whose backlog is full.
func (g *collector) bury(t *rcu.Task, dying []*Key) {
	const batch = 1024
	for len(dying) > 0 {
		n := min(batch, len(dying))
		g.s.unusedBatch(dying[:n])
		dying = dying[n:]
		t.Quiescent()
	}
}

// pruneDeferred prunes up to budget of the links a large keyring's
// deferral holds, once the scan is over, and returns how many it took.
func (g *collector) pruneDeferred(t *rcu.Task, budget int) int {
	st := g.deferred[0]
	if st.state != sweepDeferring || len(st.pending) == 0 {
		st.pending = nil
		g.deferred[0] = nil
		g.deferred = g.deferred[1:]
		return 0
	}
	t.Quiescent()
	// At most a thousand per call even when the item is unbounded: the
	// batch deletion below reports no quiescent state.
	take := st.pending[:min(budget, len(st.pending), 1024)]
	var pruned [reapReasons]uint64
	g.s.pruneFrom(st.ring, take, &pruned, g.fresh)
	clear(g.fresh)
	clear(take)
	st.pending = st.pending[len(take):]
	g.addPruned(&pruned)
	return len(take)
}

func (g *collector) endPass() {
	g.scanning = false
	defer g.inPass.Store(false)
	clear(g.sweeps)
	g.sweeping, g.deferred = nil, nil
	g.statsMu.Lock()
	g.stats.Passes++
	g.statsMu.Unlock()
	if g.end != math.MaxInt64 {
		g.scheduleAt(g.end)
	}
	g.mu.Lock()
	switch {
	case g.deadStage == 1 || g.deadStage == 2:
		if !g.foundDead {
			g.deadStage = 3 // nothing left of the type: short-circuit
		} else {
			g.deadStage++
		}
	case g.deadStage == 3:
		g.deadStage = 0
		g.deadType = nil
		close(g.deadDone)
	}
	g.batch.moveFrom(&g.graveyard)
	g.mu.Unlock()
	if g.batch.n > 0 {
		g.cookie = g.s.dom.Start()
		g.destroying = true
	}
}

// destroyChunk destroys up to budget keys of the batch once a grace period
// has passed since they were taken out of the index. It never blocks the
// worker for that grace period: if it has not passed, a callback
// reschedules the item when it has (the kernel's KEY_GC_DESTROYING).
func (g *collector) destroyChunk(t *rcu.Task, budget int) (int, bool) {
	if !g.destroying {
		return 0, false
	}
	if !g.s.dom.Done(g.cookie) {
		g.s.dom.Call(func() { g.wq.Schedule(g.work) })
		return 0, true
	}
	now := g.s.now()
	n := 0
	for n < budget && g.batch.n > 0 {
		es := g.batch.front(budget - n)
		g.statsMu.Lock()
		for _, e := range es {
			_ = g.deathH.RecordValue(max(now-e.died, 1))
		}
		g.statsMu.Unlock()
		// Outstanding drops only once the owners have their quota back:
		// WaitGC promises both.
		r := g.quota[:0]
		for i := range es {
			t.Quiescent()
			g.s.destroyInto(es[i].k, &r)
			es[i] = graveEntry{}
		}
		g.s.returnQuota(r)
		clear(r)
		g.quota = r[:0]
		g.outstanding.Add(-int64(len(es)))
		g.batch.drop(len(es))
		n += len(es)
	}
	g.statsMu.Lock()
	g.stats.Destroyed += uint64(n)
	g.statsMu.Unlock()
	if g.batch.n > 0 {
		g.wq.Schedule(g.work)
		return n, true
	}
	g.destroying = false
	return n, false
}

// GCStats returns the collector's statistics.
func (s *Service) GCStats() GCStats {
	g := s.gcol
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	st := g.stats
	st.ItemTime = latency.Of(g.itemH)
	st.ItemCPU = latency.Of(g.cpuH)
	st.DeathToDestruction = latency.Of(g.deathH)
	return st
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
	g.deadType, g.deadStage, g.deadDone = t, 1, done
	g.reapRequested = true
	g.mu.Unlock()
	g.wq.Schedule(g.work)
	<-done
	return nil
}

// deadKey is a key whose links the collector prunes, and why.
type deadKey struct {
	k        *Key
	why      int
	unlinked bool // set by ringSnap.withoutKeys
}

// pruneFrom removes ring's links to the keys dead, counting them by
// reason in pruned. Each removed link's reference to its key is dropped;
// a last one sends the key to the graveyard. fresh is scratch space for
// the batch (see freshNodes), empty on entry.
func (s *Service) pruneFrom(ring *Key, dead []deadKey, pruned *[reapReasons]uint64, fresh freshNodes) {
	ring.mu.Lock()
	var removed int
	if snap := ring.ring.Load(); snap != nil {
		next, n := snap.withoutKeys(dead, fresh)
		if n > 0 {
			ring.ring.Store(next)
			s.chargeLink(ring, -linkCost*n)
			removed = n
		}
	}
	ring.mu.Unlock()
	for _, d := range dead {
		d.k.removeParent(ring)
	}
	if removed == 0 {
		return
	}
	var dying []*Key
	for _, d := range dead {
		if !d.unlinked {
			continue
		}
		pruned[d.why]++
		if d.k.putLast() {
			dying = append(dying, d.k)
		}
	}
	s.unusedBatch(dying)
}

// killPayload finishes off a key of an unregistered type that is still
// referenced: it becomes a .dead key without a payload.
func (s *Service) killPayload(k *Key) {
	k.mu.Lock()
	old := k.typ.Swap(deadType)
	p := k.payload.Swap(nil)
	k.mu.Unlock()
	if p != nil {
		s.retirePayload(p, old.Destroy)
	}
}

// RequestGC asks the collector for a full pass now, pruning links to dead
// keys (what the kernel's timer does when an expiry is due).
func (s *Service) RequestGC() { s.gcol.requestPass(true) }
