package keys

import (
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// A sweep is the collector's walk over one keyring's links, removing those
// to dead keys, a bounded number of links per step; "Garbage collection"
// in doc.go says when the collector sweeps a keyring rather than prune
// its dead links one by one.
//
// A step resumes at a position in trie order: the trie's in-order walk
// visits positions by the trie hash's 5-bit groups, level 0's first, so a
// position is a trie hash with its groups reversed (trieOrder), and a
// step stops only at the start of a position, leaving the lower groups
// zero. Between steps the keyring may change: links added before the
// cursor are new and wait for the next pass; a subtree that has collapsed
// into a leaf at the cursor's position is visited again, which is
// harmless, since removing the dead is idempotent.

// trieOrder maps a key's hash to its place in the trie's in-order walk:
// its trie hash's 5-bit groups reversed, level 0's on top (bits 59 to
// 63), the last level's at bits 4 to 8; bits 0 to 3 are zero.
func trieOrder(h uint64) uint64 {
	var o uint64 // the loop reads the trie hash's bits alone
	for lv := range hamtLevels {
		o |= (h >> (lv * hamtBits) & hamtMask) << orderShift(lv)
	}
	return o
}

// orderShift is where level lv's group sits in a trie-order position.
func orderShift(lv int) int { return 64 - hamtBits*(lv+1) }

// sweptLink is a link a sweep removed, and why.
type sweptLink struct {
	l   link
	why ReapReason
}

// sweepWalk is one step of a sweep.
type sweepWalk struct {
	// dead reports whether a link to k goes, and why.
	dead func(k *Key) (ReapReason, bool)
	// tick is called once per node visited (the collector reports a
	// quiescent state there).
	tick func()
	// budget is how many units the step may spend: one per link visited,
	// one more per link removed. The step stops at the first position
	// boundary after the budget is spent, so it overshoots by at most one
	// removal and the rest of a collision node (entries of one 64-bit
	// hash, in practice never more than one).
	budget int

	ix      *serialIndex // the swept version's (set by sweep)
	used    int
	removed []sweptLink
	stopped bool   // the budget ran out before the walk reached the end
	next    uint64 // with stopped: where the next step resumes
}

// sweep runs one step of a sweep over r from position from, returning the
// version without the links the step removed (r itself if it removed
// none). w.removed, w.stopped and w.next report the rest.
func (r *ringSnap) sweep(from uint64, w *sweepWalk) *ringSnap {
	if r == nil || r.n == 0 {
		return r
	}
	w.ix = r.ix
	mark := len(w.removed)
	root := w.node(r.root, 0, 0, true, from)
	gone := w.removed[mark:]
	if len(gone) == 0 {
		return r
	}
	if len(gone) == r.n {
		return &ringSnap{}
	}
	nr := &ringSnap{root: root, ix: r.ix, n: r.n - len(gone), used: r.used, next: r.next, nested: r.nested}
	rings := false
	for _, g := range gone {
		if g.l.slot < 16 {
			nr.used &^= 1 << g.l.slot
		}
		rings = rings || g.l.key.isKeyring()
	}
	if rings {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool {
			return slices.ContainsFunc(gone, func(g sweptLink) bool { return g.l.key == e.key })
		})
	}
	return nr
}

// spent reports whether the budget is gone; if so the step stops at
// position at.
func (w *sweepWalk) spent(at uint64) bool {
	if w.used < w.budget {
		return false
	}
	w.stopped, w.next = true, at
	return true
}

// warm loads the records of the keys named by n's leaves and by its
// sub-nodes' leaves before the walk visits them one by one. The loads do
// not depend on each other, so the processor has dozens in flight where
// the visits, each waiting on its leaf, its key and the key's record in
// turn, would have one: in a large keyring most of these are cache
// misses, in the trie's hash order. A sub-node's own leaves were warmed
// with its parent, so each leaf is loaded twice at most, the second time
// from the cache.
func (w *sweepWalk) warm(n *hnode) {
	var sink uint32
	touch := func(p unsafe.Pointer) {
		if k := w.ix.reg.get((*leaf)(p).pos); k != nil {
			sink |= k.flags.Load()
		}
	}
	nodes := n.numNodes()
	for _, p := range n.kids[nodes:] {
		touch(p)
	}
	for _, p := range n.kids[:nodes] {
		sub := (*hnode)(p)
		for _, q := range sub.kids[sub.numNodes():] {
			touch(q)
		}
	}
	warmSink.Store(sink)
}

// warmSink keeps warm's loads from being thought useless.
var warmSink atomic.Uint32

// visit examines one leaf and reports whether it stays.
func (w *sweepWalk) visit(p unsafe.Pointer) bool {
	e := (*leaf)(p)
	k := w.ix.mustKey(e)
	w.used++
	why, dead := w.dead(k)
	if !dead {
		return true
	}
	w.used++
	w.removed = append(w.removed, sweptLink{l: link{key: k, slot: e.slot}, why: why})
	return false
}

// node sweeps n, the node at level lv whose position is path, and returns
// its replacement: n itself if nothing in it was removed, nil if nothing
// is left. With tight set, path is from's own position at this level, and
// positions before from's are skipped (an earlier step visited them).
func (w *sweepWalk) node(n *hnode, lv int, path uint64, tight bool, from uint64) *hnode {
	if w.tick != nil {
		w.tick()
	}
	if n.collision() {
		// Its entries share one hash: visited together, as one position.
		if w.spent(path) {
			return n
		}
		keep := make([]unsafe.Pointer, 0, len(n.kids))
		for _, p := range n.kids {
			if w.visit(p) {
				keep = append(keep, p)
			}
		}
		switch len(keep) {
		case len(n.kids):
			return n
		case 0:
			return nil
		}
		nn := newNode(0, 0, len(keep))
		copy(nn.kids, keep)
		return nn // with one entry left, the parent inlines it
	}
	w.warm(n)
	// Only collision nodes sit below the last level, so lv < hamtLevels
	// here and every position has a nibble.
	shift := orderShift(lv)
	start := 0
	if tight {
		start = int(from>>shift) & hamtMask
	}
	var kids [hamtWidth]unsafe.Pointer // by position, for the rebuild
	var nodemap, leafmap uint32
	changed := false
	ni, li := 0, n.numNodes()
	for m := n.nodemap | n.leafmap; m != 0; m &= m - 1 {
		bit := m & -m
		pos := bits.TrailingZeros32(bit)
		isLeaf := n.leafmap&bit != 0
		var p unsafe.Pointer
		if isLeaf {
			p = n.kids[li]
			li++
		} else {
			p = n.kids[ni]
			ni++
		}
		if pos >= start && !w.stopped && !w.spent(path|uint64(pos)<<shift) {
			if isLeaf {
				if !w.visit(p) {
					changed = true
					continue
				}
			} else {
				sub := (*hnode)(p)
				nsub := w.node(sub, lv+1, path|uint64(pos)<<shift, tight && pos == start, from)
				switch {
				case nsub == sub:
				case nsub == nil:
					changed = true
					continue
				case nsub.nodemap == 0 && len(nsub.kids) == 1:
					// A sub-node left with one leaf gives it back to this
					// level.
					changed = true
					p, isLeaf = nsub.kids[0], true
				default:
					changed = true
					p = unsafe.Pointer(nsub)
				}
			}
		}
		kids[pos] = p
		if isLeaf {
			leafmap |= bit
		} else {
			nodemap |= bit
		}
	}
	if !changed {
		return n
	}
	if nodemap|leafmap == 0 {
		return nil
	}
	nn := newNode(nodemap, leafmap, bits.OnesCount32(nodemap)+bits.OnesCount32(leafmap))
	i := 0
	for m := nodemap; m != 0; m &= m - 1 {
		nn.kids[i] = kids[bits.TrailingZeros32(m)]
		i++
	}
	for m := leafmap; m != 0; m &= m - 1 {
		nn.kids[i] = kids[bits.TrailingZeros32(m)]
		i++
	}
	return nn
}
