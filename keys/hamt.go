package keys

import (
	"hash/maphash"
	"math/bits"
)

// A keyring's links live in a persistent hash array mapped trie keyed by
// (type, description), the role the kernel's assoc_array plays: readers
// walk an immutable version without any lock, and a writer (holding the
// keyring's mutex) builds the next version by copying only the path it
// changes, then publishes it with one atomic store. Old versions are
// reclaimed by Go's garbage collector once no reader holds them; the keys
// they point to are protected by rcu.

var hashSeed = maphash.MakeSeed()

func indexHash(typ, desc string) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	h.WriteString(typ)
	h.WriteByte(0)
	h.WriteString(desc)
	return h.Sum64()
}

// link is one entry of a keyring.
type link struct {
	key  *Key
	slot uint64 // listing order (see ringSnap.orderSlot)
}

const (
	hamtBits  = 5
	hamtWidth = 1 << hamtBits
	hamtMask  = hamtWidth - 1
	hamtMaxLv = 64 / hamtBits
)

type hnode struct {
	bitmap uint32
	kids   []hkid
}

// hkid is a child of a node: a sub-node or a bucket of entries whose
// hashes agree on every level so far (usually one entry).
type hkid struct {
	node *hnode
	hash uint64
	ents []link
}

func (n *hnode) pos(bit uint32) int {
	return bits.OnesCount32(n.bitmap & (bit - 1))
}

func matches(l link, typ, desc string) bool {
	return l.key.typeName() == typ && l.key.desc == desc
}

// hget finds the entry for (typ, desc).
func hget(n *hnode, h uint64, typ, desc string) (link, bool) {
	for lv := 0; n != nil; lv++ {
		bit := uint32(1) << ((h >> (lv * hamtBits)) & hamtMask)
		if n.bitmap&bit == 0 {
			return link{}, false
		}
		k := &n.kids[n.pos(bit)]
		if k.node != nil {
			n = k.node
			continue
		}
		if k.hash != h {
			return link{}, false
		}
		for _, l := range k.ents {
			if matches(l, typ, desc) {
				return l, true
			}
		}
		return link{}, false
	}
	return link{}, false
}

// hset returns a new trie with l stored under its key, and the entry it
// replaced, if any.
func hset(n *hnode, h uint64, l link, lv int) (*hnode, link, bool) {
	typ, desc := l.key.typeName(), l.key.desc
	if n == nil {
		n = &hnode{}
	}
	bit := uint32(1) << ((h >> (lv * hamtBits)) & hamtMask)
	p := n.pos(bit)
	nn := &hnode{bitmap: n.bitmap | bit}
	if n.bitmap&bit == 0 {
		nn.kids = make([]hkid, len(n.kids)+1)
		copy(nn.kids, n.kids[:p])
		nn.kids[p] = hkid{hash: h, ents: []link{l}}
		copy(nn.kids[p+1:], n.kids[p:])
		return nn, link{}, false
	}
	nn.kids = append([]hkid(nil), n.kids...)
	k := n.kids[p]
	switch {
	case k.node != nil:
		sub, old, replaced := hset(k.node, h, l, lv+1)
		nn.kids[p] = hkid{node: sub}
		return nn, old, replaced
	case k.hash == h:
		for i, e := range k.ents {
			if matches(e, typ, desc) {
				ents := append([]link(nil), k.ents...)
				ents[i] = l
				nn.kids[p] = hkid{hash: h, ents: ents}
				return nn, e, true
			}
		}
		nn.kids[p] = hkid{hash: h, ents: append(append([]link(nil), k.ents...), l)}
		return nn, link{}, false
	case lv+1 >= hamtMaxLv:
		// Hash bits exhausted: cannot happen for distinct 64-bit hashes
		// that differ, since we only get here when they differ.
		panic("keys: hash trie too deep")
	default:
		// Split the bucket: push the existing one a level down.
		sub := &hnode{}
		obit := uint32(1) << ((k.hash >> ((lv + 1) * hamtBits)) & hamtMask)
		sub.bitmap = obit
		sub.kids = []hkid{k}
		sub2, old, replaced := hset(sub, h, l, lv+1)
		nn.kids[p] = hkid{node: sub2}
		return nn, old, replaced
	}
}

// hdel returns a new trie without the entry for (typ, desc), and that
// entry. It returns n itself when there is no such entry.
func hdel(n *hnode, h uint64, typ, desc string, lv int) (*hnode, link, bool) {
	if n == nil {
		return nil, link{}, false
	}
	bit := uint32(1) << ((h >> (lv * hamtBits)) & hamtMask)
	if n.bitmap&bit == 0 {
		return n, link{}, false
	}
	p := n.pos(bit)
	k := n.kids[p]
	var repl hkid
	var old link
	switch {
	case k.node != nil:
		sub, o, ok := hdel(k.node, h, typ, desc, lv+1)
		if !ok {
			return n, link{}, false
		}
		old = o
		switch {
		case sub == nil:
			// fall through to removal below
		case len(sub.kids) == 1 && sub.kids[0].node == nil:
			repl = sub.kids[0] // collapse a lone bucket upward
		default:
			repl = hkid{node: sub}
		}
	case k.hash != h:
		return n, link{}, false
	default:
		i := -1
		for j, e := range k.ents {
			if matches(e, typ, desc) {
				i = j
				break
			}
		}
		if i < 0 {
			return n, link{}, false
		}
		old = k.ents[i]
		if len(k.ents) > 1 {
			ents := append(append([]link(nil), k.ents[:i]...), k.ents[i+1:]...)
			repl = hkid{hash: h, ents: ents}
		}
	}
	if repl.node == nil && repl.ents == nil {
		if n.bitmap == bit {
			return nil, old, true
		}
		nn := &hnode{bitmap: n.bitmap &^ bit, kids: make([]hkid, 0, len(n.kids)-1)}
		nn.kids = append(append(nn.kids, n.kids[:p]...), n.kids[p+1:]...)
		return nn, old, true
	}
	nn := &hnode{bitmap: n.bitmap, kids: append([]hkid(nil), n.kids...)}
	nn.kids[p] = repl
	return nn, old, true
}

// hwalk calls fn for every entry until fn returns false.
func hwalk(n *hnode, fn func(link) bool) bool {
	if n == nil {
		return true
	}
	for i := range n.kids {
		k := &n.kids[i]
		if k.node != nil {
			if !hwalk(k.node, fn) {
				return false
			}
			continue
		}
		for _, l := range k.ents {
			if !fn(l) {
				return false
			}
		}
	}
	return true
}
