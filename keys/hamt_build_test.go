package keys

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// sameTrie fails unless a and b have the same shape and leaves, collision
// nodes compared as sets.
func sameTrie(t tb, a, b *hnode) {
	t.Helper()
	if (a == nil) != (b == nil) {
		t.Fatalf("one trie empty, the other not")
	}
	if a == nil {
		return
	}
	if a.nodemap != b.nodemap || a.leafmap != b.leafmap || len(a.kids) != len(b.kids) {
		t.Fatalf("nodes differ: %032b/%032b/%d against %032b/%032b/%d",
			a.nodemap, a.leafmap, len(a.kids), b.nodemap, b.leafmap, len(b.kids))
	}
	if a.collision() {
		as, bs := slices.Clone(a.kids), slices.Clone(b.kids)
		less := func(p, q unsafe.Pointer) int { return int((*leaf)(p).serial) - int((*leaf)(q).serial) }
		slices.SortFunc(as, less)
		slices.SortFunc(bs, less)
		for i := range as {
			if *(*leaf)(as[i]) != *(*leaf)(bs[i]) {
				t.Fatalf("collision nodes differ")
			}
		}
		return
	}
	on := a.numNodes()
	for i := range on {
		sameTrie(t, a.node(i), b.node(i))
	}
	for i := on; i < len(a.kids); i++ {
		if *(*leaf)(a.kids[i]) != *(*leaf)(b.kids[i]) {
			t.Fatalf("leaves differ: %+v against %+v", *(*leaf)(a.kids[i]), *(*leaf)(b.kids[i]))
		}
	}
}

// TestHbuildAsHset: a trie built at once holds what linking the same
// entries one by one holds, in the same shape, for hash schemes drawn to
// collide in every way; and two entries of one type and description are
// refused.
func TestHbuildAsHset(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		mask := rapid.SampledFrom([]uint64{
			^uint64(0), 0, 3, 0xf << 60, 1<<63 | 1, 0x1f | 0x1f<<55, 0x8421084210842108,
		}).Draw(rt, "mask")
		base := rapid.Uint64().Draw(rt, "base")
		typs := []*Type{userType, keyringType}
		hashes := map[string]uint64{}
		hash := func(typ, desc string) uint64 { return hashes[entryName(typ, desc)] }
		n := rapid.IntRange(0, 300).Draw(rt, "entries")
		var root *hnode
		var es []trieEntry
		seen := map[string]bool{}
		for i := range n {
			typ := typs[rapid.IntRange(0, 1).Draw(rt, "keyring")]
			desc := fmt.Sprint("d", rapid.IntRange(0, 400).Draw(rt, "desc"))
			name := entryName(typ.Name, desc)
			if seen[name] {
				continue
			}
			seen[name] = true
			hashes[name] = base ^ rapid.Uint64().Draw(rt, "hash")&mask
			k := testKey(s, typ, desc, Serial(i+3))
			l := s.index.leafFor(k, uint64(i))
			root, _, _ = hsetp(&s.index, root, hashes[name], l, 0, rehash(hash))
			es = append(es, newTrieEntry(hashes[name], s.index.leafFor(k, uint64(i))))
		}
		rapid.Permutation(es).Draw(rt, "order")
		built, dup := hbuild(&s.index, slices.Clone(es))
		if dup != nil {
			rt.Fatalf("hbuild: a duplicate among distinct entries")
		}
		sameTrie(rt, built, root)
		checkTrie(rt, &s.index, built, hash)
		if len(es) > 0 {
			// The same key linked twice.
			again := es[rapid.IntRange(0, len(es)-1).Draw(rt, "twice")]
			if r, dup := hbuild(&s.index, append(slices.Clone(es), again)); r != nil || dup == nil {
				rt.Fatalf("hbuild took one entry twice")
			}
		}
	})
}

// TestHbuildManyOfOne: a stream that links one key ten thousand times is
// refused without comparing every pair.
func TestHbuildManyOfOne(t *testing.T) {
	s := testService()
	k := testKey(s, userType, "one", 3)
	es := make([]trieEntry, 10000)
	for i := range es {
		es[i] = newTrieEntry(k.hash, s.index.leafFor(k, uint64(i)))
	}
	if r, dup := hbuild(&s.index, es); r != nil || dup == nil {
		t.Fatalf("hbuild took one key 10,000 times")
	}
}
