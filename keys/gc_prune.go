package keys

import "github.com/ukeys/ukeys/rcu"

// prunePass is the prune phase's state: the links to dead keys the scan
// has found, batched by keyring, and the plans for large keyrings (see
// ringSweep), which outlive a work item.
type prunePass struct {
	byRing map[*Key][]deadKey // scanChunk's links to prune, by keyring
	fresh  freshNodes         // pruneFrom's scratch
	// This pass's large keyrings, the sweeps under way in the order they
	// began, and the keyrings whose deferred dead keys are still to be
	// pruned one by one once the scan is over.
	sweeps   map[*Key]*ringSweep
	sweeping []*ringSweep
	deferred []*ringSweep
	swept    []sweptLink // sweepStep's scratch
}

// addPruned adds a step's pruned links, by reason, to the statistics.
func (g *collector) addPruned(pruned *[reapReasons]uint64) {
	g.meter.mu.Lock()
	for i, c := range pruned {
		g.meter.stats.Pruned[i] += c
	}
	g.meter.mu.Unlock()
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
	state   sweepState
	pending []deadKey // while deferring: dead keys to prune one by one
	cursor  uint64    // while sweeping: where the next step resumes
}

// sweepState is where a ringSweep stands.
type sweepState uint8

const (
	sweepDeferring sweepState = iota // few dead links known: prune them one by one after the scan
	sweepActive                      // many: the keyring is being swept in steps
	sweepDone                        // the sweep has reached the end
)

// routeDead decides how ring's link to the dead key d goes, and returns
// what that costs the item's budget now: pruned with this chunk (small
// keyrings, and links a sweep has passed), deferred (a large keyring,
// while few of its links are known dead), or left to the keyring's sweep.
func (g *collector) routeDead(ring *Key, d deadKey) int {
	st := g.prune.sweeps[ring]
	if st == nil {
		if snap := ring.loadRing(); snap == nil || snap.n < sweepMinLinks {
			g.prune.byRing[ring] = append(g.prune.byRing[ring], d)
			return 1
		}
		st = &ringSweep{ring: ring}
		g.prune.sweeps[ring] = st
		g.prune.deferred = append(g.prune.deferred, st)
	}
	switch st.state {
	case sweepDeferring:
		st.pending = append(st.pending, d)
		if snap := ring.loadRing(); snap == nil || len(st.pending)*sweepShare >= snap.n {
			// The sweep's first step starts at the beginning: it meets
			// every key deferred so far.
			st.state, st.pending = sweepActive, nil
			g.prune.sweeping = append(g.prune.sweeping, st)
		}
		return 0
	case sweepActive:
		if trieOrder(d.k.hash) >= st.cursor {
			return 0 // the sweep has yet to reach it
		}
	}
	g.prune.byRing[ring] = append(g.prune.byRing[ring], d)
	return 1
}

// sweepStep runs one step of the first sweep under way, spending at most
// budget units (see sweepWalk), and returns what it spent.
func (g *collector) sweepStep(t *rcu.Task, budget int) int {
	st := g.prune.sweeping[0]
	ring := st.ring
	w := sweepWalk{dead: g.linkDead, tick: t.Quiescent, budget: budget, removed: g.prune.swept[:0]}
	ring.mu.Lock()
	if snap := ring.loadRing(); snap != nil && snap.n > 0 {
		if next := snap.sweep(st.cursor, &w); next != snap {
			ring.storeRing(next)
			g.s.chargeLink(ring, -linkCost*len(w.removed))
		}
	}
	ring.mu.Unlock()
	if w.stopped {
		st.cursor = w.next
	} else {
		st.state = sweepDone
		g.prune.sweeping[0] = nil
		g.prune.sweeping = g.prune.sweeping[1:]
	}
	var pruned [reapReasons]uint64
	dying := g.dying[:0]
	for _, r := range w.removed {
		t.Quiescent()
		r.l.key.removeParent(ring)
		pruned[r.why]++
		if r.l.key.putLast() {
			dying = append(dying, r.l.key)
		}
	}
	g.bury(t, dying)
	g.dying = scratch(dying)
	g.addPruned(&pruned)
	g.meter.mu.Lock()
	g.meter.stats.SweptLinks += uint64(w.used - len(w.removed))
	if !w.stopped {
		g.meter.stats.Sweeps++
	}
	g.meter.mu.Unlock()
	clear(w.removed)
	g.prune.swept = w.removed[:0]
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
	st := g.prune.deferred[0]
	if st.state != sweepDeferring || len(st.pending) == 0 {
		st.pending = nil
		g.prune.deferred[0] = nil
		g.prune.deferred = g.prune.deferred[1:]
		return 0
	}
	t.Quiescent()
	// At most a thousand per call even when the item is unbounded: the
	// batch deletion below reports no quiescent state.
	take := st.pending[:min(budget, len(st.pending), 1024)]
	var pruned [reapReasons]uint64
	g.s.pruneFrom(st.ring, take, &pruned, g.prune.fresh)
	clear(g.prune.fresh)
	clear(take)
	st.pending = st.pending[len(take):]
	g.addPruned(&pruned)
	return len(take)
}

// deadKey is a key whose links the collector prunes, and why.
type deadKey struct {
	k        *Key
	why      ReapReason
	unlinked bool // set by ringSnap.withoutKeys
}

// pruneFrom removes ring's links to the keys dead, counting them by
// reason in pruned. Each removed link's reference to its key is dropped;
// a last one sends the key to the graveyard. fresh is scratch space for
// the batch (see freshNodes), empty on entry. Only the collector's worker
// calls it: it uses the collector's scratch.
func (s *Service) pruneFrom(ring *Key, dead []deadKey, pruned *[reapReasons]uint64, fresh freshNodes) {
	g := s.gcol
	ring.mu.Lock()
	// A key the scan found dead may have come back since: add_key
	// updates an expired key, which clears its expiry. Each is checked
	// again under the keyring's lock, as the kernel's keyring_gc checks
	// each link it drops, so that a key just updated, and still linked
	// when its update returned, is not unlinked and destroyed.
	still := dead[:0]
	for _, d := range dead {
		if _, ok := g.dead(d.k, g.scan.start, g.scan.delay); ok {
			still = append(still, d)
		}
	}
	clear(dead[len(still):])
	dead = still
	var removed int
	if snap := ring.loadRing(); snap != nil {
		next, n := snap.withoutKeys(dead, fresh)
		if n > 0 {
			ring.storeRing(next)
			s.chargeLink(ring, -linkCost*n)
			removed = n
		}
	}
	ring.mu.Unlock()
	if removed == 0 {
		return
	}
	// Only the links removed here: a key not linked from ring may still
	// list it until a release of ring's old links drops it (and if the
	// key was linked again since, it lists ring twice, one for each).
	for _, d := range dead {
		if d.unlinked {
			d.k.removeParent(ring)
		}
	}
	dying := g.dying[:0]
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
	g.dying = scratch(dying)
}

// scratch returns ks emptied for reuse, its keys cleared so that the
// scratch holds none of them alive.
func scratch(ks []*Key) []*Key {
	clear(ks)
	return ks[:0]
}
