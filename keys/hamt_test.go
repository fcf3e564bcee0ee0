package keys

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// testService returns a service that only holds detached keys in its
// index, whose registry the tries of trie and ring tests name.
func testService() *Service { return new(Service) }

// testKey makes a detached key for trie and ring tests: a type, a
// description and a serial, in s's index (and no more of a service).
func testKey(s *Service, t *Type, desc string, serial Serial) *Key {
	k := newKey(desc, indexHash(t.Name, desc))
	k.serial, k.quota = serial, &quotaUser{s: s}
	k.typ.Store(t)
	if _, ok := s.index.insertExact(k, serial); !ok {
		panic(fmt.Sprintf("testKey: serial %d twice", serial))
	}
	return k
}

// tb is what the checks need from *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func entryName(typ, desc string) string { return typ + "\x00" + desc }

// checkTrie verifies the trie's structural invariants and returns its
// entries by name: every bitmap agrees with its array, the two bitmaps
// never share a position, no node below the root is empty or could be
// replaced by its only leaf, collision nodes hold two or more entries of
// one hash, every entry sits on the path its hash selects, no level goes
// past the hash's end, and no (type, description) appears twice.
func checkTrie(t tb, x *serialIndex, root *hnode, hash func(typ, desc string) uint64) map[string]link {
	t.Helper()
	out := map[string]link{}
	add := func(e *leaf, lv int, prefix uint64) {
		l, ok := x.linkOf(e)
		if !ok {
			t.Fatalf("leaf %+v names no key", *e)
		}
		typ, desc := l.key.typeName(), l.key.description()
		h := hash(typ, desc)
		if lv*hamtBits < 64 {
			if mask := uint64(1)<<(lv*hamtBits) - 1; h&mask != prefix {
				t.Fatalf("entry %q (hash %#x) off its path %#x at level %d", desc, h, prefix, lv)
			}
		}
		name := entryName(typ, desc)
		if _, dup := out[name]; dup {
			t.Fatalf("entry %q stored twice", desc)
		}
		out[name] = l
	}
	var walk func(n *hnode, lv int, prefix uint64)
	walk = func(n *hnode, lv int, prefix uint64) {
		if lv > hamtLevels {
			t.Fatalf("node at level %d: deeper than the hash has bits", lv)
		}
		if n.collision() {
			if len(n.kids) < 2 {
				t.Fatalf("collision node at level %d with %d entries", lv, len(n.kids))
			}
			k0 := x.mustKey(n.leaf(0))
			h0 := trieHash(hash(k0.typeName(), k0.description()))
			for i := range n.kids {
				l := n.leaf(i)
				k := x.mustKey(l)
				if h := trieHash(hash(k.typeName(), k.description())); h != h0 {
					t.Fatalf("collision node mixes hashes %#x and %#x", h0, h)
				}
				add(l, lv, prefix)
			}
			return
		}
		if n.nodemap&n.leafmap != 0 {
			t.Fatalf("level %d: position both leaf and node: %032b", lv, n.nodemap&n.leafmap)
		}
		if bits.OnesCount32(n.nodemap)+bits.OnesCount32(n.leafmap) != len(n.kids) {
			t.Fatalf("level %d: bitmaps %032b/%032b for %d kids", lv, n.nodemap, n.leafmap, len(n.kids))
		}
		if lv > 0 && n.nodemap == 0 && len(n.kids) == 1 {
			t.Fatalf("level %d: sub-node holding a single leaf", lv)
		}
		li, ni := 0, 0
		for idx := range uint64(hamtWidth) {
			bit := uint32(1) << idx
			path := prefix
			if lv*hamtBits < 64 {
				path |= idx << (lv * hamtBits)
			}
			switch {
			case n.leafmap&bit != 0:
				add(n.leaf(li), lv+1, path)
				li++
			case n.nodemap&bit != 0:
				walk(n.node(ni), lv+1, path)
				ni++
			}
		}
	}
	if root != nil {
		if root.collision() {
			t.Fatalf("root is a collision node")
		}
		walk(root, 0, 0)
	}
	return out
}

// version is one published trie with the model it must match forever.
type version struct {
	root  *hnode
	model map[string]link
}

func checkVersion(t tb, x *serialIndex, v version, hash func(typ, desc string) uint64) {
	t.Helper()
	got := checkTrie(t, x, v.root, hash)
	if len(got) != len(v.model) {
		t.Fatalf("trie holds %d entries, model %d", len(got), len(v.model))
	}
	for name, want := range v.model {
		if g, ok := got[name]; !ok || g != want {
			t.Fatalf("entry %q: trie %+v (present %v), model %+v", name, g, ok, want)
		}
		l := want
		typ, desc := l.key.typeName(), l.key.description()
		if g, ok := hget(x, v.root, hash(typ, desc), typ, desc); !ok || g != want {
			t.Fatalf("hget %q = %+v, %v; want %+v", desc, g, ok, want)
		}
	}
	n := 0
	hwalk(x, v.root, func(l link) bool {
		n++
		if v.model[entryName(l.key.typeName(), l.key.description())] != l {
			t.Fatalf("hwalk yielded %q, not in the model", l.key.description())
		}
		return true
	})
	if n != len(v.model) {
		t.Fatalf("hwalk yielded %d entries, model has %d", n, len(v.model))
	}
}

func TestHamtBasics(t *testing.T) {
	s := testService()
	var root *hnode
	keys := map[string]*Key{}
	hash := func(typ, desc string) uint64 { return indexHash(typ, desc) }
	for i := range 2000 {
		d := fmt.Sprint("k", i)
		k := testKey(s, userType, d, Serial(i+3))
		keys[d] = k
		var replaced bool
		root, _, replaced = hset(&s.index, root, hash("user", d), link{key: k, slot: uint64(i)}, 0, keyHash)
		if replaced {
			t.Fatalf("insert of new %q reported a replacement", d)
		}
	}
	if got := checkTrie(t, &s.index, root, hash); len(got) != 2000 {
		t.Fatalf("%d entries after 2000 inserts", len(got))
	}
	// A keyring of the same description is a different entry.
	kr := testKey(s, keyringType, "k7", 99999)
	root2, _, replaced := hset(&s.index, root, hash("keyring", "k7"), link{key: kr}, 0, keyHash)
	if replaced {
		t.Fatal("keyring k7 replaced user k7")
	}
	if l, ok := hget(&s.index, root2, hash("user", "k7"), "user", "k7"); !ok || l.key != keys["k7"] {
		t.Fatal("user k7 lost after adding keyring k7")
	}
	if _, ok := hget(&s.index, root, hash("keyring", "k7"), "keyring", "k7"); ok {
		t.Fatal("old version sees keyring k7")
	}
	// Replacing returns the old entry.
	k7b := testKey(s, userType, "k7", 99998)
	root3, old, replaced := hset(&s.index, root2, hash("user", "k7"), link{key: k7b, slot: 7}, 0, keyHash)
	if !replaced || old.key != keys["k7"] {
		t.Fatalf("replace returned %+v, %v", old, replaced)
	}
	if l, _ := hget(&s.index, root3, hash("user", "k7"), "user", "k7"); l.key != k7b || l.slot != 7 {
		t.Fatalf("after replace %+v", l)
	}
	// Deleting everything leaves a nil trie; deleting the absent is a no-op.
	r := root
	for i := range 2000 {
		d := fmt.Sprint("k", i)
		if i%2 == 0 {
			if nr, _, ok := hdel(&s.index, r, hash("user", d+"x"), "user", d+"x", 0); ok || nr != r {
				t.Fatal("delete of an absent entry changed the trie")
			}
		}
		var l link
		var ok bool
		r, l, ok = hdel(&s.index, r, hash("user", d), "user", d, 0)
		if !ok || l.key != keys[d] {
			t.Fatalf("delete %q: %+v %v", d, l, ok)
		}
		if i%97 == 0 {
			checkTrie(t, &s.index, r, hash)
		}
	}
	if r != nil {
		t.Fatalf("trie not empty after deleting everything: %+v", r)
	}
	if got := checkTrie(t, &s.index, root, hash); len(got) != 2000 {
		t.Fatalf("original version changed: %d entries", len(got))
	}
	// hwalk stops when told to.
	n := 0
	hwalk(&s.index, root, func(link) bool { n++; return n < 10 })
	if n != 10 {
		t.Fatalf("hwalk went on after false: %d calls", n)
	}
}

// TestHamtHashEdges forces the shapes random hashes rarely produce: full
// 64-bit collisions (buckets of several entries) and hashes that agree on
// every bit but the top ones, which push buckets down to the last level.
func TestHamtHashEdges(t *testing.T) {
	cases := map[string]func(i int) uint64{
		"all collide":       func(int) uint64 { return 0xdeadbeef },
		"top bit only":      func(i int) uint64 { return uint64(i&1) << 63 },
		"top four bits":     func(i int) uint64 { return uint64(i&15) << 60 },
		"low bits collide":  func(i int) uint64 { return uint64(i%3) << 59 },
		"zero and all ones": func(i int) uint64 { return -uint64(i & 1) },
	}
	for name, hf := range cases {
		t.Run(name, func(t *testing.T) {
			s := testService()
			hashes := map[string]uint64{}
			hash := func(typ, desc string) uint64 { return hashes[entryName(typ, desc)] }
			var root *hnode
			model := map[string]link{}
			var versions []version
			for i := range 40 {
				d := fmt.Sprint("d", i)
				hashes[entryName("user", d)] = hf(i)
				k := testKey(s, userType, d, Serial(i+3))
				l := link{key: k, slot: uint64(i)}
				root, _, _ = hset(&s.index, root, hf(i), l, 0, rehash(hash))
				model = cloneModel(model)
				model[entryName("user", d)] = l
				versions = append(versions, version{root, model})
			}
			for i := 0; i < 40; i += 3 {
				d := fmt.Sprint("d", i)
				var ok bool
				root, _, ok = hdel(&s.index, root, hf(i), "user", d, 0)
				if !ok {
					t.Fatalf("delete %q failed", d)
				}
				model = cloneModel(model)
				delete(model, entryName("user", d))
				versions = append(versions, version{root, model})
			}
			for _, v := range versions {
				checkVersion(t, &s.index, v, hash)
			}
		})
	}
}

func rehash(hash func(typ, desc string) uint64) func(*Key) uint64 {
	return func(k *Key) uint64 { return hash(k.typeName(), k.description()) }
}

func cloneModel(m map[string]link) map[string]link {
	out := make(map[string]link, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestHamtProperty runs random sets, replacements and deletes against a map
// model, with hash functions drawn to collide in every way, and checks that
// every version ever published still matches the model it had.
func TestHamtProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		// A hash scheme: random bits under a mask, so that a mask with few
		// bits gives many full collisions and long shared prefixes.
		mask := rapid.SampledFrom([]uint64{
			^uint64(0), 0, 3, 0xf << 60, 1<<63 | 1, 0x1f | 0x1f<<55, 0x8421084210842108,
		}).Draw(rt, "mask")
		base := rapid.Uint64().Draw(rt, "base")
		typs := []*Type{userType, keyringType}
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
		var root *hnode
		model := map[string]link{}
		versions := []version{{nil, model}}
		serial := Serial(3)
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			typ := typs[rapid.IntRange(0, 1).Draw(rt, "keyring")]
			desc := fmt.Sprint("d", rapid.IntRange(0, 40).Draw(rt, "desc"))
			name := entryName(typ.Name, desc)
			h := hash(typ.Name, desc)
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0, 1: // set (insert or replace)
				serial++
				l := link{key: testKey(s, typ, desc, serial), slot: uint64(serial)}
				want, had := model[name]
				nr, old, replaced := hset(&s.index, root, h, l, 0, rehash(hash))
				if replaced != had || (had && old != want) {
					rt.Fatalf("hset %q: replaced %v (%+v), model had %v (%+v)", name, replaced, old, had, want)
				}
				root = nr
				model = cloneModel(model)
				model[name] = l
			case 2: // delete
				want, had := model[name]
				nr, old, ok := hdel(&s.index, root, h, typ.Name, desc, 0)
				if ok != had || (had && old != want) {
					rt.Fatalf("hdel %q: %v (%+v), model had %v (%+v)", name, ok, old, had, want)
				}
				if !ok && nr != root {
					rt.Fatalf("hdel of absent %q built a new version", name)
				}
				root = nr
				if had {
					model = cloneModel(model)
					delete(model, name)
				}
			}
			// Lookups of absent entries fail.
			probe := fmt.Sprint("d", rapid.IntRange(0, 40).Draw(rt, "probe"))
			ptyp := typs[rapid.IntRange(0, 1).Draw(rt, "probe keyring")]
			l, ok := hget(&s.index, root, hash(ptyp.Name, probe), ptyp.Name, probe)
			if want, had := model[entryName(ptyp.Name, probe)]; ok != had || l != want {
				rt.Fatalf("hget %q = %+v, %v; model %+v, %v", probe, l, ok, want, had)
			}
			versions = append(versions, version{root, model})
			checkVersion(rt, &s.index, versions[len(versions)-1], hash)
			// Persistence: an older version is untouched by later updates.
			checkVersion(rt, &s.index, versions[rapid.IntRange(0, len(versions)-1).Draw(rt, "old version")], hash)
		}
		for _, v := range versions {
			checkVersion(rt, &s.index, v, hash)
		}
	})
}

// nestedSerials returns the serials of a snapshot's keyring links, in the
// order it keeps them.
func nestedSerials(r *ringSnap) []Serial {
	if r == nil {
		return nil
	}
	var out []Serial
	for _, l := range r.nested {
		out = append(out, l.key.serial)
	}
	return out
}

// listing returns the serials of a snapshot's links in listing order.
func listing(r *ringSnap) []Serial {
	var out []Serial
	for _, l := range r.links() {
		out = append(out, l.key.serial)
	}
	return out
}

func TestRingSnapKernelOrder(t *testing.T) {
	s := testService()
	var r *ringSnap
	k := func(i int) *Key { return testKey(s, userType, fmt.Sprint("k", i), Serial(i)) }
	ks := []*Key{k(1), k(2), k(3), k(4)}
	for _, x := range ks {
		r, _, _ = r.with(&s.index, x)
	}
	// First into slot 0, then the highest free slot: k1, k4, k3, k2.
	if got, want := listing(r), []Serial{1, 4, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("listing %v, want %v", got, want)
	}
	// Replacing k3 keeps its slot.
	k3b := testKey(s, userType, "k3", 33)
	r, old, replaced := r.with(&s.index, k3b)
	if !replaced || old.key != ks[2] {
		t.Fatalf("replace: %+v %v", old, replaced)
	}
	if got, want := listing(r), []Serial{1, 4, 33, 2}; !slices.Equal(got, want) {
		t.Fatalf("after replace %v, want %v", got, want)
	}
	// Unlinking k4 frees slot 13 (k2 15, k3 14, k4 13); the next link takes
	// the highest free slot, 13 again.
	r, _, _ = r.without("user", "k4")
	r, _, _ = r.with(&s.index, k(5))
	if got, want := listing(r), []Serial{1, 5, 33, 2}; !slices.Equal(got, want) {
		t.Fatalf("after unlink and link %v, want %v", got, want)
	}
	// Unlinking k2 frees slot 15, which the next link takes.
	r, _, _ = r.without("user", "k2")
	r, _, _ = r.with(&s.index, k(6))
	if got, want := listing(r), []Serial{1, 5, 33, 6}; !slices.Equal(got, want) {
		t.Fatalf("after refilling slot 15 %v, want %v", got, want)
	}
	// Emptying the keyring resets it: the next link takes slot 0.
	for _, d := range []string{"k1", "k5", "k3", "k6"} {
		r, _, _ = r.without("user", d)
	}
	if r.n != 0 || len(r.links()) != 0 {
		t.Fatalf("not empty: %d", r.n)
	}
	r, _, _ = r.with(&s.index, k(7))
	r, _, _ = r.with(&s.index, k(8))
	if got, want := listing(r), []Serial{7, 8}; !slices.Equal(got, want) {
		t.Fatalf("after emptying %v, want %v", got, want)
	}
	if l := r.links(); l[0].slot != 0 || l[1].slot != 15 {
		t.Fatalf("slots %d, %d; want 0, 15", l[0].slot, l[1].slot)
	}
}

// ringModel is the listing rule written as plainly as possible: slots 0
// and 15 down to 1 for the first sixteen, then sequence numbers.
type ringModel struct {
	slot map[string]uint64
	key  map[string]*Key
	next uint64
}

func (m *ringModel) add(k *Key) {
	name := entryName(k.typeName(), k.description())
	if _, ok := m.slot[name]; ok {
		m.key[name] = k
		return
	}
	switch n := len(m.slot); {
	case n == 0:
		m.slot, m.key, m.next = map[string]uint64{}, map[string]*Key{}, 16
		m.slot[name] = 0
	case n < 16:
		used := map[uint64]bool{}
		for _, s := range m.slot {
			used[s] = true
		}
		for s := uint64(15); ; s-- {
			if !used[s] {
				m.slot[name] = s
				break
			}
		}
	default:
		m.slot[name] = m.next
		m.next++
	}
	m.key[name] = k
}

func (m *ringModel) remove(typ, desc string) {
	delete(m.slot, entryName(typ, desc))
	delete(m.key, entryName(typ, desc))
}

func (m *ringModel) order() []Serial {
	names := make([]string, 0, len(m.slot))
	for n := range m.slot {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(m.slot[a]) - int(m.slot[b]) })
	var out []Serial
	for _, n := range names {
		out = append(out, m.key[n].serial)
	}
	return out
}

func TestRingSnapProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		var r *ringSnap
		m := &ringModel{slot: map[string]uint64{}, key: map[string]*Key{}, next: 16}
		// Insertion order of the links added while the ring held 16 or more.
		var late []Serial
		serial := Serial(3)
		ndesc := rapid.SampledFrom([]int{6, 20, 40}).Draw(rt, "descriptions")
		for range rapid.IntRange(1, 150).Draw(rt, "steps") {
			typ := []*Type{userType, keyringType}[rapid.IntRange(0, 1).Draw(rt, "keyring")]
			desc := fmt.Sprint("d", rapid.IntRange(0, ndesc).Draw(rt, "desc"))
			prev, prevListing := r, listing(r)
			if rapid.IntRange(0, 3).Draw(rt, "op") < 3 {
				serial++
				k := testKey(s, typ, desc, serial)
				_, had := m.slot[entryName(typ.Name, desc)]
				if !had && len(m.slot) >= 16 {
					late = append(late, serial)
				}
				m.add(k)
				r, _, _ = r.with(&s.index, k)
			} else {
				m.remove(typ.Name, desc)
				r, _, _ = r.without(typ.Name, desc)
			}
			got := listing(r)
			if want := m.order(); !slices.Equal(got, want) {
				rt.Fatalf("listing %v, model %v", got, want)
			}
			if r != nil && r.n != len(m.slot) {
				rt.Fatalf("n = %d, model %d", r.n, len(m.slot))
			}
			// Links added to a ring of 16 or more list in insertion order.
			pos := map[Serial]int{}
			for i, s := range got {
				pos[s] = i
			}
			last := -1
			for _, s := range late {
				if p, ok := pos[s]; ok {
					if p < last {
						rt.Fatalf("late links out of insertion order: %v in %v", late, got)
					}
					last = p
				}
			}
			// nested lists exactly the keyrings, in listing order.
			var wantNested []Serial
			for _, l := range r.links() {
				if l.key.isKeyring() {
					wantNested = append(wantNested, l.key.serial)
				}
			}
			var gotNested []Serial
			if r != nil {
				for _, l := range r.nested {
					gotNested = append(gotNested, l.key.serial)
				}
			}
			if !slices.Equal(gotNested, wantNested) {
				rt.Fatalf("nested %v, want %v", gotNested, wantNested)
			}
			// The previous version is unchanged by building this one.
			if got := listing(prev); !slices.Equal(got, prevListing) {
				rt.Fatalf("previous version changed: %v, was %v", got, prevListing)
			}
		}
	})
}

// TestRingSnapBatchDelete checks the collector's batch removal against
// one removal at a time: same links, same listing, same nested keyrings,
// a sound trie, a link to another key of the same name left alone, and
// the published version untouched by the in-place edits of the batch.
func TestRingSnapBatchDelete(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := testService()
		var r *ringSnap
		var linked []*Key
		n := rapid.IntRange(0, 300).Draw(rt, "links")
		for i := range n {
			typ := []*Type{userType, keyringType}[rapid.IntRange(0, 4).Draw(rt, "keyring")/4]
			k := testKey(s, typ, fmt.Sprint("d", i), Serial(10+i))
			r, _, _ = r.with(&s.index, k)
			linked = append(linked, k)
		}
		before := listing(r)
		var dead []deadKey
		want := r
		for _, k := range linked {
			switch rapid.IntRange(0, 3).Draw(rt, "fate") {
			case 0:
				dead = append(dead, deadKey{k: k})
				want, _, _ = want.without(k.typeName(), k.description())
			case 1:
				// A key of the same type and description that is not the
				// linked one: its "link" must stay.
				dead = append(dead, deadKey{k: testKey(s, k.typ.Load(), k.description(), 1<<20+k.serial)})
			}
		}
		for i := len(dead) - 1; i > 0; i-- {
			j := rapid.IntRange(0, i).Draw(rt, "swap")
			dead[i], dead[j] = dead[j], dead[i]
		}
		got, removed := r.withoutKeys(dead, freshNodes{})
		if wantN := len(before) - len(listing(want)); removed != wantN {
			rt.Fatalf("removed %d links, want %d", removed, wantN)
		}
		for _, d := range dead {
			if d.unlinked != (d.k.serial < 1<<20) {
				rt.Fatalf("key %d: unlinked %v", d.k.serial, d.unlinked)
			}
		}
		if g, w := listing(got), listing(want); !slices.Equal(g, w) {
			rt.Fatalf("listing %v, want %v", g, w)
		}
		if got != nil && want != nil && got.n != want.n {
			rt.Fatalf("n = %d, want %d", got.n, want.n)
		}
		if gn, wn := nestedSerials(got), nestedSerials(want); !slices.Equal(gn, wn) {
			rt.Fatalf("nested %v, want %v", gn, wn)
		}
		if got != nil {
			checkTrie(rt, &s.index, got.root, indexHash)
		}
		if l := listing(r); !slices.Equal(l, before) {
			rt.Fatalf("published version changed: %v, was %v", l, before)
		}
	})
}

// TestTrieLeafOfAGoneKey is a reader still walking a version published
// before the collector destroyed one of its keys (which rcu rules out for
// readers inside protection, and which the leaves' serials make harmless
// for any other): the gone key is no entry, and neither is a key given
// its position since, even one of the same type and description.
func TestTrieLeafOfAGoneKey(t *testing.T) {
	s := testService()
	a := testKey(s, userType, "a", 10)
	other := testKey(s, userType, "other", 11)
	var r *ringSnap
	r, _, _ = r.with(&s.index, a)
	r, _, _ = r.with(&s.index, other)
	pos, ok := s.index.position(a)
	if !ok {
		t.Fatal("a linked key is not in the registry")
	}
	check := func(when string) {
		t.Helper()
		if l, ok := r.find("user", "a"); ok {
			t.Fatalf("%s: found %+v", when, l)
		}
		if got := listing(r); !slices.Equal(got, []Serial{11}) {
			t.Fatalf("%s: listing %v, want [11]", when, got)
		}
		if l, ok := r.find("user", "other"); !ok || l.key != other {
			t.Fatalf("%s: the other key: %+v, %v", when, l, ok)
		}
	}
	if !s.index.remove(a) {
		t.Fatal("remove failed")
	}
	check("destroyed")
	b := newKey("a", indexHash("user", "a"))
	b.serial, b.quota = 12, &quotaUser{s: s}
	b.typ.Store(userType)
	(*s.index.reg.blocks.Load())[pos>>registryBits][pos&(registryChunk-1)].Store(b)
	check("its position given to another key of its name")
}
