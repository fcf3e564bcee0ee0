package keys

import (
	"math/bits"
	"slices"
	"unsafe"
)

// A keyring's trie built at once from all its links, for Import: each
// node of the result is allocated once, at its final size. Linking one
// by one (hsetp) copies a path per link, which for the hand-over of a
// million keys in keyrings of 10,000 cost 700 MB of nodes thrown away
// and most of the new daemon's time (the pages faulted in and cleared).

// trieEntry is one link to place: its leaf and its key's index hash.
type trieEntry struct {
	// order is the trie hash with its levels' digits reversed, the
	// first level's highest: sorted by it, the entries of each node's
	// position lie together, in position order, at every level.
	order uint64
	l     *leaf
}

// newTrieEntry returns the entry of leaf l, whose key's index hash is h.
func newTrieEntry(h uint64, l *leaf) trieEntry {
	var o uint64
	for lv := range hamtLevels {
		o = o<<hamtBits | (h>>(lv*hamtBits))&hamtMask
	}
	return trieEntry{order: o, l: l}
}

// digit is the position an entry takes at level lv.
func (e trieEntry) digit(lv int) uint32 {
	return uint32(e.order>>((hamtLevels-1-lv)*hamtBits)) & hamtMask
}

// hbuild returns the trie of the entries es, which it sorts: the trie
// hsetp would make of them, but for the order within collision nodes.
// If two entries name keys of one type and description, it returns nil
// and one of them.
func hbuild(x *serialIndex, es []trieEntry) (*hnode, *leaf) {
	if len(es) == 0 {
		return nil, nil
	}
	slices.SortFunc(es, func(a, b trieEntry) int {
		switch {
		case a.order < b.order:
			return -1
		case a.order > b.order:
			return 1
		}
		return 0
	})
	return hbuildNode(x, es, 0)
}

// hbuildNode builds the node at level lv of the sorted entries es, which
// agree on the levels above.
func hbuildNode(x *serialIndex, es []trieEntry, lv int) (*hnode, *leaf) {
	var nodemap, leafmap uint32
	for i := 0; i < len(es); {
		d := es[i].digit(lv)
		j := i + 1
		for j < len(es) && es[j].digit(lv) == d {
			j++
		}
		if j-i == 1 {
			leafmap |= 1 << d
		} else {
			nodemap |= 1 << d
		}
		i = j
	}
	n := newNode(nodemap, leafmap, bits.OnesCount32(nodemap)+bits.OnesCount32(leafmap))
	ni, li := 0, bits.OnesCount32(nodemap)
	for i := 0; i < len(es); {
		d := es[i].digit(lv)
		j := i + 1
		for j < len(es) && es[j].digit(lv) == d {
			j++
		}
		switch {
		case j-i == 1:
			n.kids[li] = unsafe.Pointer(es[i].l)
			li++
		case es[i].order == es[j-1].order:
			// One trie hash (sorted: the first and the last agree).
			c, dup := hbuildCollision(x, es[i:j])
			if dup != nil {
				return nil, dup
			}
			n.kids[ni] = unsafe.Pointer(c)
			ni++
		default:
			sub, dup := hbuildNode(x, es[i:j], lv+1)
			if dup != nil {
				return nil, dup
			}
			n.kids[ni] = unsafe.Pointer(sub)
			ni++
		}
		i = j
	}
	return n, nil
}

// hbuildCollision makes the collision node of es, two or more entries of
// one trie hash, unless two of them name one type and description.
func hbuildCollision(x *serialIndex, es []trieEntry) (*hnode, *leaf) {
	n := newNode(0, 0, len(es))
	if len(es) <= 8 {
		for i, e := range es {
			k := x.mustKey(e.l)
			typ, desc := k.typeName(), k.description()
			for _, o := range es[:i] {
				if _, same := x.match(o.l, typ, desc); same {
					return nil, e.l
				}
			}
			n.kids[i] = unsafe.Pointer(e.l)
		}
		return n, nil
	}
	// Many (a stream that links one key many times): a set, not pairs.
	type name struct{ typ, desc string }
	seen := make(map[name]struct{}, len(es))
	for i, e := range es {
		k := x.mustKey(e.l)
		nm := name{k.typeName(), k.description()}
		if _, dup := seen[nm]; dup {
			return nil, e.l
		}
		seen[nm] = struct{}{}
		n.kids[i] = unsafe.Pointer(e.l)
	}
	return n, nil
}

// hleaves appends every leaf of the trie n to out, in trie order,
// without reading their keys.
func hleaves(n *hnode, out []leaf) []leaf {
	if n == nil {
		return out
	}
	on := n.numNodes() // 0 in a collision node
	for i := range on {
		out = hleaves(n.node(i), out)
	}
	for _, p := range n.kids[on:] {
		out = append(out, *(*leaf)(p))
	}
	return out
}
