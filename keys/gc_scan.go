package keys

import (
	"math"

	"github.com/ukeys/ukeys/rcu"
)

// scanPass is the scan phase's state: where the walk of the serial index
// stands, across work items, and what this pass decided at its start.
type scanPass struct {
	active     bool        // a pass is under way
	cursor     indexCursor // where the next chunk starts
	start, end int64       // the pass's time; the earliest expiry it found still to come
	delay      int64       // gc_delay in force for this pass
	reapLinks  bool        // prune links to expired and revoked keys too
	foundDead  bool        // a key of the type being unregistered was seen
	scratch    []*Key      // scanChunk's keys
	leftover   []*Key      // fetched, not yet examined
	done       bool        // the cursor has passed the last shard
}

// beginPass starts a pass from the start of the index with what has been
// asked of the collector so far: a request made during the pass is owed
// another one.
func (g *collector) beginPass() {
	g.mu.Lock()
	g.reapRequested = false
	g.scan.reapLinks = g.linksPending
	g.linksPending = false
	if g.deadStage != typeReapNone {
		g.scan.reapLinks = true
	}
	g.mu.Unlock()
	g.scan.active = true
	g.inPass.Store(true)
	g.scan.cursor = indexCursor{}
	g.scan.leftover, g.scan.done = nil, false
	g.scan.start = g.s.now()
	g.scan.end = math.MaxInt64
	g.scan.delay = int64(g.s.Tunables().GCDelay)
	g.scan.foundDead = false
}

// linksDue reports whether this pass prunes links to keys dead for why:
// invalidated keys and keys of a dead type at once, expired and revoked
// ones when the pass was asked to.
func (g *collector) linksDue(why ReapReason) bool {
	return g.scan.reapLinks || why == ReapInvalidated || why == ReapDead
}

// linkDead reports whether this pass prunes links to k, and why.
func (g *collector) linkDead(k *Key) (ReapReason, bool) {
	why, dead := g.dead(k, g.scan.start, g.scan.delay)
	if !dead || !g.linksDue(why) {
		return 0, false
	}
	return why, true
}

// scanChunk examines up to budget keys after the cursor, and returns the
// units of work it spent and how many keys it examined. It holds the
// index lock only while it copies the chunk's keys.
func (g *collector) scanChunk(t *rcu.Task, budget int) (int, int) {
	// Keys fetched by an earlier item that ran out of budget come first.
	ks := g.scan.leftover
	if len(ks) == 0 {
		ks, g.scan.done = g.s.index.scan(&g.scan.cursor, budget, g.scan.scratch[:0])
		g.scan.scratch = ks
	}
	g.mu.Lock()
	deadType, stage := g.deadType, g.deadStage
	g.mu.Unlock()
	var pruned [reapReasons]uint64
	// Links to this chunk's dead keys, by keyring: each keyring is then
	// locked once and gets one new version for all of them.
	prune := g.prune.byRing
	// The budget counts keys examined plus links to prune: a chunk whose
	// keys are all dead would otherwise cost an item several times what a
	// chunk of live keys does. What the budget leaves is kept for the next
	// item.
	// Free positions walked count too, sixteen to a unit: after a mass
	// removal a chunk may find few keys among many of them.
	units, n := g.scan.cursor.visited/16, 0
	g.scan.cursor.visited = 0
	for ; n < len(ks) && units < budget; n++ {
		k := ks[n]
		units++
		t.Quiescent()
		if deadType != nil && k.typ.Load() == deadType {
			g.scan.foundDead = true
			switch stage {
			case typeReapMark:
				k.setFlag(flagDead)
				k.perm.Store(0)
			case typeReapKill:
				g.s.killPayload(k)
			}
		}
		if reason, isDead := g.dead(k, g.scan.start, g.scan.delay); isDead {
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
			if at := e + g.scan.delay; at > g.scan.start && at < g.scan.end {
				g.scan.end = at
			}
		}
	}
	for ring, dead := range prune {
		t.Quiescent()
		g.s.pruneFrom(ring, dead, &pruned, g.prune.fresh)
		clear(g.prune.fresh)
		delete(prune, ring)
	}
	g.addPruned(&pruned)
	g.meter.mu.Lock()
	g.meter.stats.Scanned += uint64(n)
	g.meter.mu.Unlock()
	clear(ks[:n]) // no stale pointers kept alive between items
	g.scan.leftover = ks[n:]
	return units, n
}

// dead reports whether k's links are due for pruning at limit, and why.
func (g *collector) dead(k *Key, limit int64, delay int64) (ReapReason, bool) {
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

// endPass closes a finished scan: it arms the timer for the earliest
// expiry still to come, moves the type being unregistered to its next
// stage, and hands the keys buried so far to the destroy phase, whose
// grace period starts now.
func (g *collector) endPass() {
	g.scan.active = false
	defer g.inPass.Store(false)
	clear(g.prune.sweeps)
	g.prune.sweeping, g.prune.deferred = nil, nil
	g.meter.mu.Lock()
	g.meter.stats.Passes++
	g.meter.mu.Unlock()
	if g.scan.end != math.MaxInt64 {
		g.scheduleAt(g.scan.end)
	}
	g.mu.Lock()
	switch {
	case g.deadStage == typeReapMark || g.deadStage == typeReapUnlink:
		if !g.scan.foundDead {
			g.deadStage = typeReapKill // nothing left of the type: short-circuit
		} else {
			g.deadStage++
		}
	case g.deadStage == typeReapKill:
		g.deadStage = typeReapNone
		g.deadType = nil
		close(g.deadDone)
	}
	g.mu.Unlock()
	g.startDestroy()
}
