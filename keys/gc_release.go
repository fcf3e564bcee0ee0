package keys

import "github.com/ukeys/ukeys/rcu"

// A keyring cleared (keyctl_clear) or destroyed gives up all its links at
// once. The kernel swaps in an empty associative array and drops the old
// one's references in an RCU callback, so the caller returns at once; here
// the keyring publishes an empty trie and hands the old one to the
// collector, which drops a chunk of its references per work item. Clearing
// a keyring of a million keys used to walk, unparent and put all of them
// in the caller: 0.4 s of a processor, more than a scheduler slice, in
// which a foreground caller's goroutine was one more contending for the
// processors.
//
// Until the collector gets to a key, its reverse links still name the
// keyring. Every reader of them copes: the collector's routing of a dead
// key to its keyrings finds no link to prune there, and Export checks the
// keyrings named while any release is pending. WaitGC waits for the
// releases, so a settled service lists exactly the keyrings that link
// each key.

// release is one keyring's detached links still to be dropped.
type release struct {
	ring *Key
	it   trieIter
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
// closing.
func (s *Service) releaseLinks(ring *Key, old *ringSnap) {
	if old == nil || old.n == 0 {
		return
	}
	g := s.gcol
	r := &release{ring: ring, it: newTrieIter(old.ix, old.root)}
	s.deferUnlessClosed(func() {
		g.mu.Lock()
		g.releases = append(g.releases, r)
		g.mu.Unlock()
		g.kick()
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

// releasesPending reports whether a release waits for the collector.
func (g *collector) releasesPending() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.releases) > 0
}

// releaseChunk drops detached references, oldest release first, within
// budget, and returns the units it spent: one for each reference, and one
// more for each key that lost its last and left the index, a removal
// that costs more than the rest together (a table probe in a random
// shard, a miss in any cache: with both counted as one, an item of 1,024
// took 1.3-1.8 ms of CPU, where other items take under one).
func (g *collector) releaseChunk(t *rcu.Task, budget int) int {
	work := 0
	for work < budget {
		g.mu.Lock()
		if len(g.releases) == 0 {
			g.mu.Unlock()
			break
		}
		r := g.releases[0]
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
			g.releases[0] = nil
			g.releases = g.releases[1:]
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
	g.mu.Unlock()
	for _, r := range rs {
		g.releaseAll(r)
	}
}

// linksKey reports whether ring's current links include k.
func linksKey(ring, k *Key) bool {
	l, ok := ring.loadRing().findHash(ownHash(k), k.typeName(), k.description())
	return ok && l.key == k
}
