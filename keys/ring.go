package keys

import (
	"cmp"
	"math/bits"
	"slices"
)

// ringSnap is one immutable version of a keyring's contents. Readers load
// it from Key.ring inside rcu protection and walk it without locks;
// writers, holding the keyring's mu, build the next version.
type ringSnap struct {
	root *hnode
	// ix is the index whose registry the leaves name: the keyring's
	// service's, set by the first link (an empty version needs none).
	ix     *serialIndex
	n      int
	nested []link // the keyring-type links, in listing order
	used   uint16 // listing slots 0..15 in use
	next   uint64 // next slot for keyrings of more than 16 links
}

// Listing order follows the kernel's for keyrings of up to 16 links (its
// associative array fits one node then): the first link into an empty
// keyring takes slot 0, each later one the highest free slot, a replaced
// link keeps its slot. A link added to a keyring that already holds 16
// or more lists after every earlier one, so larger keyrings list further
// links in the order they were added.
func (r *ringSnap) orderSlot() uint64 {
	if r.n == 0 {
		return 0
	}
	if r.n < 16 {
		// Fewer than 16 links leave one of the slots 0..15 free.
		return uint64(15 - bits.LeadingZeros16(^r.used))
	}
	return max(r.next, 16)
}

func (r *ringSnap) find(typ, desc string) (link, bool) {
	if r == nil || r.n == 0 {
		return link{}, false
	}
	return hget(r.ix, r.root, indexHash(typ, desc), typ, desc)
}

// findHash is find for a caller that has computed indexHash(typ, desc).
func (r *ringSnap) findHash(h uint64, typ, desc string) (link, bool) {
	if r == nil || r.n == 0 {
		return link{}, false
	}
	return hget(r.ix, r.root, h, typ, desc)
}

// links returns the links in listing order.
func (r *ringSnap) links() []link {
	if r == nil || r.n == 0 {
		return nil
	}
	ls := r.sortedLeaves(make([]leaf, 0, r.n))
	out := make([]link, 0, len(ls))
	for i := range ls {
		if k := r.ix.keyOf(&ls[i]); k != nil {
			out = append(out, link{key: k, slot: ls[i].slot})
		}
	}
	return out
}

// sortedLeaves appends r's leaves to out in listing order. Their keys
// are for the caller to read, in that order: a walk of the trie through
// the keys met them in hash order, and each key's line had left the
// cache by the time the caller read it again.
func (r *ringSnap) sortedLeaves(out []leaf) []leaf {
	if r == nil {
		return out
	}
	out = hleaves(r.root, out)
	slices.SortFunc(out, func(a, b leaf) int { return cmp.Compare(a.slot, b.slot) })
	return out
}

// with returns the version with k linked (replacing any link of the same
// type and description) and the link it replaced. It walks the trie
// once. ix is the keyring's service's index, passed rather than read
// from k, whose owner record (and with it the way to its service) only
// k's own mu guards.
func (r *ringSnap) with(ix *serialIndex, k *Key) (*ringSnap, link, bool) {
	if r == nil {
		r = &ringSnap{}
	}
	l := ix.leafFor(k, r.orderSlot())
	root, old, replacing := hsetp(ix, r.root, k.hash, l, 0, ownHash)
	nr := &ringSnap{root: root, ix: ix, used: r.used, next: r.next, n: r.n, nested: r.nested}
	if replacing {
		// A replaced link keeps its slot. l is not published yet.
		l.slot = old.slot
	} else {
		if l.slot < 16 {
			nr.used |= 1 << l.slot
		} else {
			nr.next = l.slot + 1
		}
		nr.n++
	}
	if k.isKeyring() || (replacing && old.key.isKeyring()) {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool { return replacing && e.key == old.key })
		if k.isKeyring() {
			nr.nested = append(nr.nested, link{key: k, slot: l.slot})
			slices.SortFunc(nr.nested, func(a, b link) int { return cmp.Compare(a.slot, b.slot) })
		}
	}
	return nr, old, replacing
}

// without returns the version without the link for (typ, desc).
func (r *ringSnap) without(typ, desc string) (*ringSnap, link, bool) {
	if r == nil {
		return r, link{}, false
	}
	root, old, ok := hdel(r.ix, r.root, indexHash(typ, desc), typ, desc, 0)
	if !ok {
		return r, link{}, false
	}
	nr := &ringSnap{root: root, ix: r.ix, n: r.n - 1, used: r.used, next: r.next, nested: r.nested}
	if old.slot < 16 {
		nr.used &^= 1 << old.slot
	}
	if nr.n == 0 {
		nr = &ringSnap{}
	}
	if old.key.isKeyring() {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool { return e.key == old.key })
	}
	return nr, old, true
}

// withoutKeys returns the version without the links to the keys of dead
// (a link goes only if it is to that very key), built as one batch with
// fresh as its scratch space, and how many links it removed. It sets
// unlinked on the entries whose link it removed.
func (r *ringSnap) withoutKeys(dead []deadKey, fresh freshNodes) (*ringSnap, int) {
	if r == nil || r.n == 0 {
		return r, 0
	}
	root, used, n := r.root, r.used, 0
	rings := false
	for i := range dead {
		k := dead[i].k
		// k.hash is where k was linked: only unregistering a type changes
		// a key's type, and a key of a dead type is never linked.
		nr, old, ok := hdelKey(r.ix, root, k.hash, k, 0, fresh)
		if !ok {
			continue
		}
		root = nr
		dead[i].unlinked = true
		n++
		if old.slot < 16 {
			used &^= 1 << old.slot
		}
		rings = rings || k.isKeyring()
	}
	if n == 0 {
		return r, 0
	}
	if n == r.n {
		return &ringSnap{}, n
	}
	nr := &ringSnap{root: root, ix: r.ix, n: r.n - n, used: used, next: r.next, nested: r.nested}
	if rings {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool {
			return slices.ContainsFunc(dead, func(d deadKey) bool { return d.unlinked && d.k == e.key })
		})
	}
	return nr, n
}
