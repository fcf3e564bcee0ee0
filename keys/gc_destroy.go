package keys

import "github.com/ukeys/ukeys/rcu"

// destroyPass is the destroy phase's state: the keys buried before the
// last scan ended, destroyed a chunk at a time once the grace period
// that began then has passed.
type destroyPass struct {
	active bool
	cookie rcu.Cookie   // the grace period the batch waits for
	batch  graves       // buried keys taken from the graveyard
	quota  quotaReturns // destroyChunk's scratch
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
	head   int // entries of blocks[0] already handled (front and drop)
	n      int
}

const graveBlock = 1024

// push appends e, taking a new block from spare if it has one.
func (q *graves) push(e graveEntry, spare *[][]graveEntry) {
	if len(q.blocks) == 0 || len(q.blocks[len(q.blocks)-1]) == graveBlock {
		var b []graveEntry
		if n := len(*spare); n > 0 {
			b = (*spare)[n-1]
			(*spare)[n-1] = nil
			*spare = (*spare)[:n-1]
		} else {
			b = make([]graveEntry, 0, graveBlock)
		}
		q.blocks = append(q.blocks, b)
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, e)
	q.n++
}

// moveFrom appends o's entries to q and empties o, which has had none
// handled.
func (q *graves) moveFrom(o *graves) {
	q.blocks = append(q.blocks, o.blocks...)
	q.n += o.n
	*o = graves{}
}

// front returns up to max entries from the head of the queue (from one
// block); drop removes that many once they are handled.
func (q *graves) front(max int) []graveEntry {
	b := q.blocks[0][q.head:]
	return b[:min(max, len(b))]
}

// drop removes k entries from the head, and returns the block they
// emptied, if they did, cleared for reuse.
func (q *graves) drop(k int) []graveEntry {
	q.head += k
	q.n -= k
	b := q.blocks[0]
	if q.head < len(b) {
		return nil
	}
	q.blocks[0] = nil
	q.blocks = q.blocks[1:]
	q.head = 0
	clear(b)
	return b[:0]
}

// buriedAll takes keys whose last reference went (already counted in
// outstanding by Service.unusedBatch), under one lock.
func (g *collector) buriedAll(ks []*Key) {
	now := g.s.now()
	g.mu.Lock()
	for _, k := range ks {
		g.graveyard.push(graveEntry{k: k, died: now}, &g.spare)
	}
	g.mu.Unlock()
	g.kick()
}

// recycle keeps an emptied block of graves for the next burials, up to
// spareBlocks of them.
func (g *collector) recycle(b []graveEntry) {
	g.mu.Lock()
	if len(g.spare) < spareBlocks {
		g.spare = append(g.spare, b)
	}
	g.mu.Unlock()
}

// spareBlocks is how many emptied blocks of graves the collector keeps
// (1 MiB of them).
const spareBlocks = 64

// startDestroy begins the destroy phase for the keys buried so far: they
// are destroyed once a grace period that begins now has passed.
func (g *collector) startDestroy() {
	g.mu.Lock()
	g.destroy.batch.moveFrom(&g.graveyard)
	g.mu.Unlock()
	if g.destroy.batch.n > 0 {
		g.destroy.cookie = g.s.dom.Start()
		g.destroy.active = true
	}
}

// destroyChunk destroys up to budget keys of the batch once a grace period
// has passed since they were taken out of the index. It never blocks the
// worker for that grace period: if it has not passed, a callback
// reschedules the item when it has (the kernel's KEY_GC_DESTROYING).
func (g *collector) destroyChunk(t *rcu.Task, budget int) (int, bool) {
	if !g.destroy.active {
		return 0, false
	}
	if !g.s.dom.Done(g.destroy.cookie) {
		g.s.dom.Call(g.kick)
		return 0, true
	}
	now := g.s.now()
	n := 0
	for n < budget && g.destroy.batch.n > 0 {
		es := g.destroy.batch.front(budget - n)
		g.meter.mu.Lock()
		for _, e := range es {
			g.meter.deathH.record(max(now-e.died, 1))
		}
		g.meter.mu.Unlock()
		// Outstanding drops only once the owners have their quota back:
		// WaitGC promises both.
		r := g.destroy.quota[:0]
		for i := range es {
			t.Quiescent()
			g.s.destroyInto(es[i].k, &r)
			es[i] = graveEntry{}
		}
		g.s.returnQuota(r)
		clear(r)
		g.destroy.quota = r[:0]
		g.outstanding.Add(-int64(len(es)))
		if b := g.destroy.batch.drop(len(es)); b != nil {
			g.recycle(b)
		}
		n += len(es)
	}
	g.meter.mu.Lock()
	g.meter.stats.Destroyed += uint64(n)
	g.meter.mu.Unlock()
	if g.destroy.batch.n > 0 {
		g.wq.Schedule(g.work)
		return n, true
	}
	g.destroy.active = false
	return n, false
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
	if p := k.swapPayload(nil); p != nil {
		p.release(k.typ.Load().Destroy)
	}
	// Only keyrings have links (detachRing stores nothing for the rest).
	links := s.detachRing(k, nil)
	if k.typ.Load() == keyringType && k.description()[0] != '.' {
		s.unpublishName(k)
	}
	u, ql := k.quota, int(k.quotalen)
	inQuota := k.has(flagInQuota)
	instantiated := k.state.Load() != stateUninstantiated
	var watches []*watch
	var trusted *Key // what a key_or_keyring restriction referenced
	if e := k.ext.Load(); e != nil {
		watches, e.watches = e.watches, nil
		if r := e.restrict.Load(); r != nil && r.Trusted != nil {
			trusted = r.Trusted
			e.restrict.Store(&restriction{Restriction: Restriction{Check: r.Check}})
		}
	}
	k.mu.Unlock()
	for _, w := range watches {
		w.removed(k.serial)
	}
	r.add(u, inQuota, ql, instantiated)
	s.destroyed.Add(1)
	// A destroyed keyring drops its links, through the collector (a
	// keyring may hold a million).
	s.releaseLinks(k, links, false)
	if trusted != nil {
		s.putAll([]*Key{trusted})
	}
}
