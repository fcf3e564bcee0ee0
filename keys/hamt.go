package keys

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// A keyring's links live in a persistent hash array mapped trie keyed by
// (type, description), the role the kernel's assoc_array plays: readers
// walk an immutable version without any lock, and a writer (holding the
// keyring's mutex) builds the next version by copying only the path it
// changes, then publishes it with one atomic store. Old versions are
// reclaimed by Go's garbage collector once no reader holds them; the keys
// they point to are protected by rcu.
//
// A node keeps its sub-nodes and its leaves in one dense array of
// pointers indexed by the population counts of two bitmaps, allocated
// together with the node, so that an update allocates one object and
// copies at most 32 pointers per level, and a leaf costs one pointer plus
// the 16-byte leaf it points to. Leaves do not store their hash: the rare
// split that must know where an existing leaf goes recomputes it. Entries
// whose trie hashes are equal share a collision node, a node with both
// bitmaps empty whose leaves are all those entries.
//
// A leaf names its key by position in the service's registry (see
// keyRegistry), not by pointer, so that Go's collector marks a leaf
// without scanning it and reaches the keys once, through the registry, in
// the order they were allocated: a pointer in each leaf, in the trie's
// hash order, would make the mark of a million keys in one keyring half
// as long again (BenchmarkMillionKeys). Every trie function takes the
// index whose registry its leaves name.

var hashSeed = maphash.MakeSeed()

// indexHash is the trie's hash of a (type, description) pair: the
// description's hash with the type's folded in. Two one-shot maphash
// calls cost a third of streaming both strings through a maphash.Hash,
// and every search computes one.
func indexHash(typ, desc string) uint64 {
	return maphash.String(hashSeed, desc) ^ maphash.String(hashSeed, typ)*0x9e3779b97f4a7c15
}

// keyHash is the index hash of a key's own type and description.
func keyHash(k *Key) uint64 { return indexHash(k.typeName(), k.description()) }

// ownHash is a key's index hash as it was worked out when the key was
// made, which is where a keyring links it and where the collector looks
// for the link (hdelKey): keyHash differs once the key's type is
// unregistered, and costs two hashes where this costs a load.
func ownHash(k *Key) uint64 { return k.hash }

// link is one entry of a keyring, as the trie's readers see it.
type link struct {
	key  *Key
	slot uint64 // listing order (see ringSnap.orderSlot)
}

// leaf is one entry of a keyring as the trie stores it: pointer-free.
type leaf struct {
	pos uint32 // the key's position in the registry
	// serial tells a position given to another key since the leaf was
	// read. A writer never meets one (a linked key holds a reference, so
	// it is neither destroyed nor removed from the registry), nor does a
	// reader inside rcu protection (the collector destroys a key a grace
	// period after its last link went); the check costs a compare.
	serial Serial
	slot   uint64
}

// leafFor returns a new leaf for k, which must be indexed (every key is,
// from its allocation until the collector destroys it).
func (x *serialIndex) leafFor(k *Key, slot uint64) *leaf {
	pos, ok := x.position(k)
	if !ok {
		panic("keys: linking a key that is not indexed")
	}
	return &leaf{pos: pos, serial: k.serial, slot: slot}
}

// keyOf is the key e names, nil if its position holds another key now.
func (x *serialIndex) keyOf(e *leaf) *Key {
	if k := x.reg.get(e.pos); k != nil && k.serial == e.serial {
		return k
	}
	return nil
}

// linkOf is e as a link, false if its key is gone (see leaf.serial).
func (x *serialIndex) linkOf(e *leaf) (link, bool) {
	k := x.keyOf(e)
	return link{key: k, slot: e.slot}, k != nil
}

// mustKey is keyOf for a writer, for whom every leaf's key is there.
func (x *serialIndex) mustKey(e *leaf) *Key {
	k := x.keyOf(e)
	if k == nil {
		panic("keys: a keyring links a key that is not indexed")
	}
	return k
}

// Nodes have 32 positions, each level indexed by 5 bits of the hash. With
// 16, a path copy of a large keyring would allocate a little less, but Go's
// collector would take far more CPU to mark a million-key keyring
// (BenchmarkMillionKeys), and a search would walk one level more.
const (
	hamtBits  = 5
	hamtWidth = 1 << hamtBits
	hamtMask  = hamtWidth - 1
	// hamtLevels is how many levels the trie hash indexes: its low 60
	// bits, twelve levels of five (trieHash).
	hamtLevels   = 12
	hamtHashBits = hamtLevels * hamtBits
)

// trieHash is the part of a key's index hash that places it in the trie.
// Entries equal in it share a collision node.
func trieHash(h uint64) uint64 { return h & (1<<hamtHashBits - 1) }

// hnode is one node of the trie. Published nodes are never modified.
//
// kids holds the sub-nodes (*hnode) in position order, then the leaves
// (*leaf) in position order: one array, allocated with the node (see
// newNode), so that a path copy allocates once per level. In a collision
// node (both maps empty) every kid is a leaf, all of one hash.
type hnode struct {
	nodemap uint32 // positions holding a sub-node
	leafmap uint32 // positions holding a leaf
	kids    []unsafe.Pointer
}

func (n *hnode) collision() bool { return n.nodemap|n.leafmap == 0 }

// numNodes is how many of the kids are sub-nodes.
func (n *hnode) numNodes() int { return bits.OnesCount32(n.nodemap) }

func (n *hnode) node(i int) *hnode { return (*hnode)(n.kids[i]) }

// leaf returns the i-th leaf (counting leaves only).
func (n *hnode) leaf(i int) *leaf { return (*leaf)(n.kids[n.numNodes()+i]) }

// newNode allocates a node with room for k kids in the same allocation,
// rounded up to a few sizes so that the types stay few.
func newNode(nodemap, leafmap uint32, k int) *hnode {
	switch {
	case k <= 1:
		return nodeWith[[1]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 2:
		return nodeWith[[2]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 4:
		return nodeWith[[4]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 6:
		return nodeWith[[6]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 8:
		return nodeWith[[8]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 12:
		return nodeWith[[12]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 16:
		return nodeWith[[16]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 24:
		return nodeWith[[24]unsafe.Pointer](nodemap, leafmap, k)
	case k <= 32:
		return nodeWith[[32]unsafe.Pointer](nodemap, leafmap, k)
	}
	// Only a collision node of more than 32 entries.
	return &hnode{nodemap: nodemap, leafmap: leafmap, kids: make([]unsafe.Pointer, k)}
}

func nodeWith[A any](nodemap, leafmap uint32, k int) *hnode {
	x := new(struct {
		h hnode
		a A
	})
	x.h.nodemap, x.h.leafmap = nodemap, leafmap
	x.h.kids = unsafe.Slice((*unsafe.Pointer)(unsafe.Pointer(&x.a)), k)
	return &x.h
}

// edit returns a copy of n with the bitmaps nodemap and leafmap, which
// differ from n's at most at position bit, where the new node holds p
// (if the position is set in either map). Every other kid is n's.
func (n *hnode) edit(nodemap, leafmap, bit uint32, p unsafe.Pointer) *hnode {
	nn := newNode(nodemap, leafmap, bits.OnesCount32(nodemap)+bits.OnesCount32(leafmap))
	on := n.numNodes()
	dn := splice(nn.kids, n.kids[:on], n.nodemap, nodemap, bit, p)
	splice(nn.kids[dn:], n.kids[on:], n.leafmap, leafmap, bit, p)
	return nn
}

// splice copies the kids src, indexed by bitmap om, into dst as indexed by
// nm, which differs from om at most at bit, where p goes. It returns how
// many it wrote.
func splice(dst, src []unsafe.Pointer, om, nm, bit uint32, p unsafe.Pointer) int {
	switch had, has := om&bit != 0, nm&bit != 0; {
	case had && has:
		i := rank(om, bit)
		copy(dst, src)
		dst[i] = p
	case has:
		i := rank(nm, bit)
		copy(dst, src[:i])
		dst[i] = p
		copy(dst[i+1:], src[i:])
	case had:
		i := rank(om, bit)
		copy(dst, src[:i])
		copy(dst[i:], src[i+1:])
	default:
		copy(dst, src)
	}
	return bits.OnesCount32(nm)
}

// hbit is the bitmap bit that hash h selects at level lv. Only levels
// below hamtLevels hold positions (a node past them is a collision node),
// so hbit reads the trie hash's bits alone; only comparisons of hashes
// (hsetp) must mask the rest off.
func hbit(h uint64, lv int) uint32 { return 1 << ((h >> (lv * hamtBits)) & hamtMask) }

// rank is the index in a dense array of the position bit in bitmap m.
func rank(m, bit uint32) int { return bits.OnesCount32(m & (bit - 1)) }

// match returns e as a link if it is the entry for (typ, desc); a
// reader's leaf whose key is gone is no entry.
func (x *serialIndex) match(e *leaf, typ, desc string) (link, bool) {
	if k := x.keyOf(e); k != nil && k.description() == desc && k.typeName() == typ {
		return link{key: k, slot: e.slot}, true
	}
	return link{}, false
}

// collisionWith returns a copy of collision node n with entry i replaced
// by l (i < len), l added (i == len) or entry i removed (l nil).
func (n *hnode) collisionWith(i int, l *leaf) *hnode {
	k := len(n.kids)
	switch {
	case l == nil:
		k--
	case i == k:
		k++
	}
	nn := newNode(0, 0, k)
	switch {
	case l == nil:
		copy(nn.kids, n.kids[:i])
		copy(nn.kids[i:], n.kids[i+1:])
	default:
		copy(nn.kids, n.kids)
		nn.kids[i] = unsafe.Pointer(l)
	}
	return nn
}

// hget finds the entry for (typ, desc), whose hash is h.
func hget(x *serialIndex, n *hnode, h uint64, typ, desc string) (link, bool) {
	for lv := 0; n != nil; lv++ {
		if n.collision() {
			for _, p := range n.kids {
				if l, ok := x.match((*leaf)(p), typ, desc); ok {
					return l, true
				}
			}
			return link{}, false
		}
		bit := hbit(h, lv)
		if n.leafmap&bit != 0 {
			return x.match(n.leaf(rank(n.leafmap, bit)), typ, desc)
		}
		if n.nodemap&bit == 0 {
			return link{}, false
		}
		n = n.node(rank(n.nodemap, bit))
	}
	return link{}, false
}

// hset returns a new trie, rooted at level lv, with l stored under its key
// (whose hash is h), and the entry it replaced, if any. rehash gives the
// hash of a key already in the trie.
func hset(x *serialIndex, n *hnode, h uint64, l link, lv int, rehash func(*Key) uint64) (*hnode, link, bool) {
	return hsetp(x, n, h, x.leafFor(l.key, l.slot), lv, rehash)
}

func hsetp(x *serialIndex, n *hnode, h uint64, l *leaf, lv int, rehash func(*Key) uint64) (*hnode, link, bool) {
	h = trieHash(h) // compared with rehash's below
	bit := hbit(h, lv)
	if n == nil {
		nn := newNode(0, bit, 1)
		nn.kids[0] = unsafe.Pointer(l)
		return nn, link{}, false
	}
	nk := x.mustKey(l)
	typ, desc := nk.typeName(), nk.description()
	if n.collision() {
		ch := trieHash(rehash(x.mustKey((*leaf)(n.kids[0]))))
		if ch != h {
			// Push the collision node a level down, beside the new leaf.
			wrap := newNode(hbit(ch, lv), 0, 1)
			wrap.kids[0] = unsafe.Pointer(n)
			return hsetp(x, wrap, h, l, lv, rehash)
		}
		for i, p := range n.kids {
			if old, ok := x.match((*leaf)(p), typ, desc); ok {
				return n.collisionWith(i, l), old, true
			}
		}
		return n.collisionWith(len(n.kids), l), link{}, false
	}
	switch {
	case n.leafmap&bit != 0:
		e := n.leaf(rank(n.leafmap, bit))
		if old, ok := x.match(e, typ, desc); ok {
			return n.edit(n.nodemap, n.leafmap, bit, unsafe.Pointer(l)), old, true
		}
		// Two entries at one position: they move into a sub-node.
		var sub *hnode
		if eh := trieHash(rehash(x.mustKey(e))); eh == h {
			sub = newNode(0, 0, 2)
			sub.kids[0], sub.kids[1] = unsafe.Pointer(e), unsafe.Pointer(l)
		} else {
			if lv+1 >= hamtLevels {
				// Trie hashes that differ do so at some level below
				// hamtLevels.
				panic("keys: hash trie too deep")
			}
			one := newNode(0, hbit(eh, lv+1), 1)
			one.kids[0] = unsafe.Pointer(e)
			sub, _, _ = hsetp(x, one, h, l, lv+1, rehash)
		}
		return n.edit(n.nodemap|bit, n.leafmap&^bit, bit, unsafe.Pointer(sub)), link{}, false
	case n.nodemap&bit != 0:
		sub, old, repl := hsetp(x, n.node(rank(n.nodemap, bit)), h, l, lv+1, rehash)
		return n.edit(n.nodemap, n.leafmap, bit, unsafe.Pointer(sub)), old, repl
	default:
		return n.edit(n.nodemap, n.leafmap|bit, bit, unsafe.Pointer(l)), link{}, false
	}
}

// hdel returns a new trie without the entry for (typ, desc), whose hash
// is h, and that entry. It returns n itself when there is no such entry,
// and nil when the entry was the last.
func hdel(x *serialIndex, n *hnode, h uint64, typ, desc string, lv int) (*hnode, link, bool) {
	return hdelWhere(x, n, h, lv, delMatch{typ: typ, desc: desc}, nil)
}

// hdelKey is hdel for a batch (see freshNodes): it removes the entry that
// links key k itself, and only that, whose hash h is where k was linked.
func hdelKey(x *serialIndex, n *hnode, h uint64, k *Key, lv int, fresh freshNodes) (*hnode, link, bool) {
	return hdelWhere(x, n, h, lv, delMatch{key: k}, fresh)
}

// delMatch picks the entry a deletion removes: the link to key, or else
// the entry for (typ, desc).
type delMatch struct {
	key       *Key
	typ, desc string
}

// is returns e as a link if it is the entry m picks.
func (m delMatch) is(x *serialIndex, e *leaf) (link, bool) {
	if m.key != nil {
		if e.serial == m.key.serial && x.keyOf(e) == m.key {
			return link{key: m.key, slot: e.slot}, true
		}
		return link{}, false
	}
	return x.match(e, m.typ, m.desc)
}

// hdelWhere is the deletion walk of hdel and hdelKey. With fresh nil every
// node on the path is copied; with a batch's fresh set, nodes the batch
// already copied are edited in place.
func hdelWhere(x *serialIndex, n *hnode, h uint64, lv int, m delMatch, fresh freshNodes) (*hnode, link, bool) {
	if n == nil {
		return nil, link{}, false
	}
	if n.collision() {
		for i, p := range n.kids {
			if old, ok := m.is(x, (*leaf)(p)); ok {
				// A single survivor is inlined by the parent (below).
				return n.collisionWith(i, nil), old, true
			}
		}
		return n, link{}, false
	}
	bit := hbit(h, lv)
	if n.leafmap&bit != 0 {
		old, ok := m.is(x, n.leaf(rank(n.leafmap, bit)))
		if !ok {
			return n, link{}, false
		}
		if n.nodemap|n.leafmap == bit {
			return nil, old, true
		}
		return n.editFresh(n.nodemap, n.leafmap&^bit, bit, nil, fresh), old, true
	}
	if n.nodemap&bit == 0 {
		return n, link{}, false
	}
	sub, old, ok := hdelWhere(x, n.node(rank(n.nodemap, bit)), h, lv+1, m, fresh)
	switch {
	case !ok:
		return n, link{}, false
	case sub == nil:
		if n.nodemap|n.leafmap == bit {
			return nil, old, true
		}
		return n.editFresh(n.nodemap&^bit, n.leafmap, bit, nil, fresh), old, true
	case sub.nodemap == 0 && len(sub.kids) == 1:
		// A sub-node left with one leaf gives it back to this level.
		return n.editFresh(n.nodemap&^bit, n.leafmap|bit, bit, sub.kids[0], fresh), old, true
	default:
		return n.editFresh(n.nodemap, n.leafmap, bit, unsafe.Pointer(sub), fresh), old, true
	}
}

// hwalk calls fn for every entry, in trie order, until fn returns false.
// A reader's leaf whose key is gone is skipped.
func hwalk(x *serialIndex, n *hnode, fn func(link) bool) bool {
	if n == nil {
		return true
	}
	visit := func(p unsafe.Pointer) bool {
		l, ok := x.linkOf((*leaf)(p))
		return !ok || fn(l)
	}
	if n.collision() {
		for _, p := range n.kids {
			if !visit(p) {
				return false
			}
		}
		return true
	}
	ni, li := 0, n.numNodes()
	for m := n.nodemap | n.leafmap; m != 0; m &= m - 1 {
		bit := m & -m
		if n.leafmap&bit != 0 {
			if !visit(n.kids[li]) {
				return false
			}
			li++
			continue
		}
		if !hwalk(x, n.node(ni), fn) {
			return false
		}
		ni++
	}
	return true
}

// A batch of deletions (the collector pruning a chunk of dead keys from
// one keyring) builds one new version instead of one per deletion. The
// first deletion to pass through a node copies it, as hdel does; the copy
// is recorded in fresh, and later deletions of the batch edit it in
// place: no reader can see it before the version is published.
type freshNodes map[*hnode]struct{}

// editFresh is edit for a batch: in place when the batch made n. With no
// batch (fresh nil) it is edit.
func (n *hnode) editFresh(nodemap, leafmap, bit uint32, p unsafe.Pointer, fresh freshNodes) *hnode {
	if _, ok := fresh[n]; !ok {
		nn := n.edit(nodemap, leafmap, bit, p)
		if fresh != nil {
			fresh[nn] = struct{}{}
		}
		return nn
	}
	// Deletions never grow a node, so the kids fit in its array.
	var tmp [hamtWidth]unsafe.Pointer
	on := n.numNodes()
	dn := splice(tmp[:], n.kids[:on], n.nodemap, nodemap, bit, p)
	k := dn + splice(tmp[dn:], n.kids[on:], n.leafmap, leafmap, bit, p)
	copy(n.kids, tmp[:k])
	clear(n.kids[k:]) // let the garbage collector have what left
	n.kids = n.kids[:k]
	n.nodemap, n.leafmap = nodemap, leafmap
	return n
}
