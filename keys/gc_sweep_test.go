package keys

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestTrieOrder checks the premise of a sweep's cursor: the trie's
// in-order walk visits entries in trieOrder of their hashes.
func TestTrieOrder(t *testing.T) {
	s := testService()
	var root *hnode
	for i := range 5000 {
		k := testKey(s, userType, fmt.Sprint("k", i), Serial(i+3))
		root, _, _ = hset(&s.index, root, k.hash, link{key: k}, 0, keyHash)
	}
	var prev uint64
	n := 0
	hwalk(&s.index, root, func(l link) bool {
		o := trieOrder(l.key.hash)
		if n > 0 && o <= prev {
			t.Fatalf("entry %d: order %#x after %#x", n, o, prev)
		}
		prev = o
		n++
		return true
	})
	if n != 5000 {
		t.Fatalf("walked %d entries", n)
	}
	// Levels 0 to 11 select positions 1 to 12: in trie order level 0's
	// group is on top. The hash's top four bits are not the trie's.
	if got := trieOrder(0xf62d4941cc520c41); got != 0x08864298e84a96c0 {
		t.Fatalf("trieOrder(0xf62d4941cc520c41) = %#x", got)
	}
}

// TestSweepProperty sweeps tries of every hash shape (full collisions,
// long shared prefixes) in steps of random budgets, while links are added
// and removed between the steps, and checks that: every link to a key
// dead from the start, or added dead ahead of the cursor, is gone at the
// end; every other link is exactly as the changes left it; the removed
// links are reported once each; each step keeps to its budget (plus one
// removal and the rest of a collision node); the trie stays sound; and
// every version published on the way is untouched.
func TestSweepProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		mask := rapid.SampledFrom([]uint64{
			^uint64(0), 0, 3, 0xf << 60, 1<<63 | 1, 0x1f | 0x1f<<55, 0x8421084210842108,
		}).Draw(rt, "mask")
		base := rapid.Uint64().Draw(rt, "base")
		hashes := map[string]uint64{}
		hash := func(typ, desc string) uint64 {
			name := entryName(typ, desc)
			h, ok := hashes[name]
			if !ok {
				h = base ^ rapid.Uint64().Draw(rt, "hash "+name)&mask
				hashes[name] = h
			}
			return h
		}
		dead := map[*Key]bool{}
		mustGo := map[*Key]bool{} // dead links the sweep must remove
		var root *hnode
		model := map[string]link{}
		serial := Serial(3)
		add := func(desc string, isDead bool) *Key {
			serial++
			k := testKey(s, userType, desc, serial)
			k.hash = hash("user", desc)
			l := link{key: k, slot: uint64(serial)}
			var old link
			var replaced bool
			root, old, replaced = hset(&s.index, root, k.hash, l, 0, rehash(hash))
			if replaced {
				delete(mustGo, old.key)
			}
			model = cloneModel(model)
			model[entryName("user", desc)] = l
			if isDead {
				dead[k] = true
			}
			return k
		}
		n := rapid.IntRange(0, 300).Draw(rt, "links")
		for i := range n {
			if k := add(fmt.Sprint("d", i), rapid.IntRange(0, 2).Draw(rt, "dead") > 0); dead[k] {
				mustGo[k] = true
			}
		}
		versions := []version{{root, model}}
		var cursor uint64
		removed := map[*Key]bool{}
		for steps := 0; ; steps++ {
			if steps > 10_000 {
				rt.Fatalf("sweep made no progress")
			}
			budget := rapid.IntRange(1, 64).Draw(rt, "budget")
			w := sweepWalk{budget: budget, dead: func(k *Key) (ReapReason, bool) { return ReapExpired, dead[k] }}
			snap := &ringSnap{root: root, ix: &s.index, n: len(model)}
			c := largestCollision(root)
			next := snap.sweep(cursor, &w)
			if w.used > budget-1+2*c {
				rt.Fatalf("step used %d units of a budget of %d", w.used, budget)
			}
			for _, r := range w.removed {
				if removed[r.l.key] || !dead[r.l.key] {
					rt.Fatalf("removed %q twice or alive", r.l.key.description())
				}
				removed[r.l.key] = true
				delete(mustGo, r.l.key)
				model = cloneModel(model)
				delete(model, entryName("user", r.l.key.description()))
			}
			if next.n != len(model) {
				rt.Fatalf("n = %d, model %d", next.n, len(model))
			}
			root = next.root
			versions = append(versions, version{root, model})
			checkVersion(rt, &s.index, versions[len(versions)-1], hash)
			if !w.stopped {
				break
			}
			if w.next <= cursor {
				rt.Fatalf("cursor went from %#x to %#x", cursor, w.next)
			}
			cursor = w.next
			// Changes between steps: links added (dead or alive) and removed.
			for range rapid.IntRange(0, 3).Draw(rt, "changes") {
				desc := fmt.Sprint("d", rapid.IntRange(0, n+20).Draw(rt, "desc"))
				if rapid.Bool().Draw(rt, "remove") {
					name := entryName("user", desc)
					if l, ok := model[name]; ok {
						root, _, _ = hdel(&s.index, root, hash("user", desc), "user", desc, 0)
						model = cloneModel(model)
						delete(model, name)
						delete(mustGo, l.key)
					}
					continue
				}
				k := add(desc, rapid.Bool().Draw(rt, "added dead"))
				if dead[k] && trieOrder(k.hash) >= cursor {
					mustGo[k] = true
				}
			}
			versions = append(versions, version{root, model})
		}
		for k := range mustGo {
			rt.Fatalf("dead link %q (order %#x) survived the sweep", k.description(), trieOrder(k.hash))
		}
		for _, l := range model {
			if dead[l.key] && !removed[l.key] && trieOrder(l.key.hash) >= cursor {
				// Added ahead of the final step's start and not removed.
				rt.Fatalf("dead link %q left ahead of the cursor", l.key.description())
			}
		}
		for _, v := range versions {
			checkVersion(rt, &s.index, v, hash)
		}
	})
}

// largestCollision is the most entries a node of the trie visits as one
// position: a collision node's, or 1.
func largestCollision(n *hnode) int {
	if n == nil {
		return 1
	}
	if n.collision() {
		return len(n.kids)
	}
	c := 1
	for i := range n.numNodes() {
		c = max(c, largestCollision(n.node(i)))
	}
	return c
}

// TestRingSnapSweep checks a whole sweep of a keyring against removing
// the dead links one at a time: same links, same listing, same nested
// keyrings and count.
func TestRingSnapSweep(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		var r *ringSnap
		dead := map[*Key]bool{}
		want := (*ringSnap)(nil)
		n := rapid.IntRange(0, 400).Draw(rt, "links")
		var linked []*Key
		for i := range n {
			typ := []*Type{userType, keyringType}[rapid.IntRange(0, 4).Draw(rt, "keyring")/4]
			k := testKey(s, typ, fmt.Sprint("d", i), Serial(10+i))
			r, _, _ = r.with(&s.index, k)
			linked = append(linked, k)
		}
		if r == nil {
			r = &ringSnap{}
		}
		want = r
		for _, k := range linked {
			if rapid.Bool().Draw(rt, "dead") {
				dead[k] = true
				want, _, _ = want.without(k.typeName(), k.description())
			}
		}
		before := listing(r)
		got := r
		var cursor uint64
		removed := 0
		for {
			w := sweepWalk{budget: rapid.IntRange(1, 200).Draw(rt, "budget"), dead: func(k *Key) (ReapReason, bool) { return ReapRevoked, dead[k] }}
			got = got.sweep(cursor, &w)
			removed += len(w.removed)
			if !w.stopped {
				break
			}
			cursor = w.next
		}
		if removed != len(dead) {
			rt.Fatalf("removed %d links, %d dead", removed, len(dead))
		}
		if g, w := listing(got), listing(want); !slices.Equal(g, w) {
			rt.Fatalf("listing %v, want %v", g, w)
		}
		if got.n != len(listing(want)) {
			rt.Fatalf("n = %d, want %d", got.n, len(listing(want)))
		}
		if gn, wn := nestedSerials(got), nestedSerials(want); !slices.Equal(gn, wn) {
			rt.Fatalf("nested %v, want %v", gn, wn)
		}
		checkTrie(rt, &s.index, got.root, indexHash)
		if l := listing(r); !slices.Equal(l, before) {
			rt.Fatalf("published version changed: %v, was %v", l, before)
		}
		// The next link added lists where it would have after removals one by
		// one.
		k := testKey(s, userType, "late", 5000)
		g2, _, _ := got.with(&s.index, k)
		w2, _, _ := want.with(&s.index, k)
		if g, w := listing(g2), listing(w2); !slices.Equal(g, w) {
			rt.Fatalf("after a new link: listing %v, want %v", g, w)
		}
	})
}
