package keys

import (
	"slices"
	"time"

	"github.com/ukeys/ukeys/rcu"
)

// A link removed from a keyring keeps holding its key for a while, as in
// the kernel: there a removed link's reference is dropped in an RCU
// callback, a grace period after the removal (keyctl_unlink, a keyring
// cleared or revoked, a link displaced by one of the same type and
// description, a move's source), and until the key's last reference goes
// key_lookup still finds it by serial. In that window the key is
// possessed by no one (nothing links it): keyctl_describe answers with
// the owner's, group's or others' view permission, keyctl_read is EACCES
// for want of possession (or reads, if those grant read), an unlink from
// the keyring it left is ENOENT, everything else that needs a permission
// the key does not grant them is EACCES; once the last reference goes it
// is ENOKEY, and its quota comes back (on kernel 6.18, 17 ms after the
// unlink on average, 10 to 40 ms mostly, more under load). A script that
// unlinks and then looks gets those answers, not ENOKEY at once.
//
// Here the foreground does only what makes the link gone (the keyring's next
// version, the key's reverse link, the keyring owner's link quota) and
// queues the reference for the collector, which drops it releaseDelay later,
// a chunk at a time; a key that loses its last reference then leaves the
// serial index and is destroyed as any other. The unlink never takes the key
// out of the index itself, which keeps its cost to the caller that of the
// link alone. Links that the collector itself prunes (invalidated, expired,
// revoked or dead keys) and those of a destroyed keyring are dropped as the
// collector removes them.

// DefaultReleaseDelay is how long a link removed from a keyring keeps
// holding its key before the collector drops the reference: about the
// kernel's RCU grace period through which the same reference goes.
const DefaultReleaseDelay = 20 * time.Millisecond

// monoBase anchors monoNow.
var monoBase = time.Now()

// monoNow is a monotonic time in nanoseconds, never 0 (a release queued
// at 0 is due at once).
func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// putLater hands the collector k's reference held by a link just removed:
// it is dropped releaseDelay from now. Called without locks held.
func (s *Service) putLater(k *Key) {
	g := s.gcol
	g.releasing.Add(1)
	s.deferUnlessClosed(func() {
		at := monoNow()
		g.mu.Lock()
		first := g.puts.n == 0
		g.puts.push(graveEntry{k: k, died: at}, &g.spare)
		g.mu.Unlock()
		if first {
			g.armRelease(s.releaseDelay)
		}
	}, func() {
		k.put()
		g.releasing.Add(-1)
	})
}

// armRelease makes the item run in d, when the oldest queued release
// becomes due (at once if d is not positive).
func (g *collector) armRelease(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
	case d <= 0:
		g.wq.Schedule(g.work)
	default:
		g.wq.ScheduleAfter(g.relTimer, d)
	}
}

// due reports whether a release queued at time at may be dropped at now.
// g.mu is held.
func (g *collector) due(at, now int64) bool {
	return at <= g.flushBefore || at+int64(g.s.releaseDelay) <= now
}

// expedite makes every release queued so far due at once, and kicks the
// item (WaitGC).
func (g *collector) expedite() {
	g.mu.Lock()
	g.flushBefore = monoNow()
	g.mu.Unlock()
	g.kick()
}

// armPendingRelease arms the release timer for the oldest release that is
// queued but not yet due, if any.
func (g *collector) armPendingRelease() {
	if g.releasing.Load() == 0 {
		return
	}
	now := monoNow()
	g.mu.Lock()
	oldest := int64(0)
	if g.puts.n > 0 {
		oldest = g.puts.front(1)[0].died
	}
	for _, r := range g.releases {
		if r.at != 0 && (oldest == 0 || r.at < oldest) {
			oldest = r.at
		}
	}
	g.mu.Unlock()
	if oldest != 0 {
		g.armRelease(time.Duration(oldest + int64(g.s.releaseDelay) - now))
	}
}

// A keyring cleared (keyctl_clear) or destroyed gives up all its links at
// once. The kernel swaps in an empty associative array and drops the old
// one's references in an RCU callback, so the caller returns at once; here
// the keyring publishes an empty trie and hands the old one to the
// collector, which drops a chunk of its references per work item:
// walking, unparenting and putting a million keys in the caller would take
// far more than a scheduler slice of a foreground goroutine
// (TestGCClearReleasesLater pins that the caller does not).
//
// Until the collector gets to a key, its reverse links still name the
// keyring. Every reader of them copes: the collector's routing of a dead
// key to its keyrings finds no link to prune there, and Export checks the
// keyrings named while any release is pending. WaitGC waits for the
// releases, so a settled service lists exactly the keyrings that link
// each key.

// release is one keyring's detached links still to be dropped, from at
// on (monoNow's time it was queued; 0: at once).
type release struct {
	ring *Key
	it   trieIter
	at   int64
}

// trieIter visits the leaves of a trie that nobody modifies any more, a
// few at a time.
type trieIter struct {
	ix    *serialIndex
	stack []trieFrame
}

type trieFrame struct {
	n *hnode
	i int // the next of n.kids to visit
}

func newTrieIter(ix *serialIndex, root *hnode) trieIter {
	if root == nil {
		return trieIter{}
	}
	return trieIter{ix: ix, stack: []trieFrame{{n: root}}}
}

// next appends to out the keys of up to max more leaves; fewer only when
// the walk is over.
func (it *trieIter) next(out []*Key, max int) []*Key {
	for added := 0; added < max && len(it.stack) > 0; {
		f := &it.stack[len(it.stack)-1]
		if f.i == len(f.n.kids) {
			it.stack[len(it.stack)-1] = trieFrame{}
			it.stack = it.stack[:len(it.stack)-1]
			continue
		}
		i := f.i
		f.i++
		if !f.n.collision() && i < f.n.numNodes() {
			it.stack = append(it.stack, trieFrame{n: f.n.node(i)})
			continue
		}
		// The detached links still hold their keys' references.
		out = append(out, it.ix.mustKey((*leaf)(f.n.kids[i])))
		added++
	}
	return out
}

func (it *trieIter) done() bool { return len(it.stack) == 0 }

// detachRing replaces ring's links by next (empty, or nil for a
// keyring being destroyed) and returns the old ones, which the caller
// passes to releaseLinks once it has let go of ring.mu, which it holds.
// The old links are counted as being released before they are replaced,
// so that whoever sees the keyring without them also sees the release
// pending.
func (s *Service) detachRing(ring *Key, next *ringSnap) *ringSnap {
	old := ring.loadRing()
	if old == nil {
		return nil // not a keyring, or destroyed already
	}
	s.gcol.releasing.Add(int64(old.n))
	ring.storeRing(next)
	return old
}

// releaseLinks hands ring's links detached by detachRing to the
// collector, or drops their references at once if the service is
// closing. With later (a keyring cleared or revoked) they are dropped
// releaseDelay from now, as putLater's; else (a keyring destroyed) as
// soon as the collector gets to them.
func (s *Service) releaseLinks(ring *Key, old *ringSnap, later bool) {
	if old == nil || old.n == 0 {
		return
	}
	g := s.gcol
	r := &release{ring: ring, it: newTrieIter(old.ix, old.root)}
	if later {
		r.at = monoNow()
	}
	s.deferUnlessClosed(func() {
		g.mu.Lock()
		g.releases = append(g.releases, r)
		g.mu.Unlock()
		if later {
			g.armRelease(s.releaseDelay)
		} else {
			g.kick()
		}
	}, func() { g.releaseAll(r) })
}

// releaseAll drops every reference r still holds, burying the keys that
// lose their last.
func (g *collector) releaseAll(r *release) {
	var ks []*Key
	for !r.it.done() {
		ks = r.it.next(ks[:0], graveBlock)
		for _, k := range ks {
			k.removeParent(r.ring)
		}
		g.s.putAll(ks)
		g.releasing.Add(-int64(len(ks)))
	}
}

// releasesPending reports whether a release waiting for the collector
// is due.
func (g *collector) releasesPending() bool {
	now := monoNow()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.puts.n > 0 && g.due(g.puts.front(1)[0].died, now) {
		return true
	}
	return g.dueRelease(now) >= 0
}

// dueRelease returns the index of the first due keyring release, -1 if
// none is. g.mu is held.
func (g *collector) dueRelease(now int64) int {
	return slices.IndexFunc(g.releases, func(r *release) bool { return g.due(r.at, now) })
}

// putChunk drops up to max of the queued references that are due, and
// returns how many it dropped and how many keys lost their last (and
// left the index).
func (g *collector) putChunk(t *rcu.Task, max int) (int, int) {
	now := monoNow()
	g.mu.Lock()
	if g.puts.n == 0 {
		g.mu.Unlock()
		return 0, 0
	}
	es := g.puts.front(max)
	n := 0
	for n < len(es) && g.due(es[n].died, now) {
		n++
	}
	es = es[:n]
	g.mu.Unlock()
	if n == 0 {
		return 0, 0
	}
	dying := g.dying[:0]
	for i := range es {
		t.Quiescent()
		if es[i].k.putLast() {
			dying = append(dying, es[i].k)
		}
		es[i] = graveEntry{}
	}
	g.bury(t, dying)
	nd := len(dying)
	g.dying = scratch(dying)
	g.mu.Lock()
	b := g.puts.drop(n)
	if b != nil && len(g.spare) < spareBlocks {
		g.spare = append(g.spare, b)
	}
	g.mu.Unlock()
	g.releasing.Add(-int64(n))
	return n, nd
}

// releaseChunk drops detached references, oldest release first, within
// budget, and returns the units it spent: one for each reference, and one
// more for each key that lost its last and left the index, a removal
// that costs more than the rest together (a table probe in a random
// shard, a miss in any cache: with both counted as one, an item of 1,024
// would take more CPU than any other item).
func (g *collector) releaseChunk(t *rcu.Task, budget int) int {
	work := 0
	for work < budget {
		n, nd := g.putChunk(t, min((budget-work)/2+(budget-work)%2, graveBlock))
		if n == 0 {
			break
		}
		work += n + nd
	}
	for work < budget {
		g.mu.Lock()
		i := g.dueRelease(monoNow())
		if i < 0 {
			g.mu.Unlock()
			break
		}
		r := g.releases[i]
		g.mu.Unlock()
		ks := r.it.next(g.relKeys[:0], min((budget-work)/2+1, graveBlock))
		dying := g.dying[:0]
		for _, k := range ks {
			t.Quiescent()
			k.removeParent(r.ring)
			if k.putLast() {
				dying = append(dying, k)
			}
		}
		g.bury(t, dying)
		g.dying = scratch(dying)
		// Only now, with the dying counted as outstanding: WaitGC never
		// sees neither.
		g.releasing.Add(-int64(len(ks)))
		work += len(ks) + len(dying)
		clear(ks)
		g.relKeys = ks[:0]
		if r.it.done() {
			g.mu.Lock()
			g.releases = slices.DeleteFunc(g.releases, func(o *release) bool { return o == r })
			g.mu.Unlock()
		}
	}
	return work
}

// closeReleases drops, at once, the references of every release the
// collector has not got to (when the service closes).
func (g *collector) closeReleases() {
	g.mu.Lock()
	rs := g.releases
	g.releases = nil
	puts := g.puts
	g.puts = graves{}
	g.mu.Unlock()
	for _, r := range rs {
		g.releaseAll(r)
	}
	for i, b := range puts.blocks {
		if i == 0 {
			b = b[puts.head:]
		}
		ks := make([]*Key, len(b))
		for j, e := range b {
			ks[j] = e.k
		}
		g.s.putAll(ks)
		g.releasing.Add(-int64(len(b)))
	}
}

// linksKey reports whether ring's current links include k.
func linksKey(ring, k *Key) bool {
	l, ok := ring.loadRing().findHash(ownHash(k), k.typeName(), k.description())
	return ok && l.key == k
}
